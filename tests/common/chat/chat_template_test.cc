// Tests of ChatTemplate: the chat templates Qwen3 and Llama 3.1 / 3.2 ship, rendered for the cases
// of tests/data/chat_templates/expected.json (written by make_expected.py with Python's Jinja2 as
// Hugging Face transformers configures it), and loading from tokenizer_config.json.
#include "common/chat/chat_template.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/util/status_matchers.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace specdec::chat {
namespace {

using nlohmann::ordered_json;

std::string DataDir() { return std::string(SPECDEC_SOURCE_DIR) + "/tests/data/chat_templates"; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ordered_json Expected() { return ordered_json::parse(ReadText(DataDir() + "/expected.json")); }

// A clock at expected.json's "now" ([year, month, day, hour, minute, second]).
ChatTemplate::Clock FixedClock(const ordered_json& now) {
  std::tm tm{};
  tm.tm_year = now[0].get<int>() - 1900;
  tm.tm_mon = now[1].get<int>() - 1;
  tm.tm_mday = now[2].get<int>();
  tm.tm_hour = now[3].get<int>();
  tm.tm_min = now[4].get<int>();
  tm.tm_sec = now[5].get<int>();
  const std::time_t t = timegm(&tm);  // Fills in the weekday and day of the year.
  gmtime_r(&t, &tm);
  return [tm] { return tm; };
}

absl::StatusOr<ChatTemplate> LoadTemplate(const ordered_json& expected, const std::string& name) {
  const ordered_json& info = expected["templates"][name];
  auto t = ChatTemplate::FromString(ReadText(DataDir() + "/" + info["file"].get<std::string>()),
                                    info["bos_token"].get<std::string>(),
                                    info["eos_token"].get<std::string>());
  if (t.ok()) t->set_clock(FixedClock(expected["now"]));
  return t;
}

void ExpectCase(const ChatTemplate& t, const ordered_json& c) {
  const bool add_generation_prompt = c["add_generation_prompt"].get<bool>();
  const absl::StatusOr<std::string> got =
      t.Render(c["messages"], add_generation_prompt, c["extra"]);
  if (c.contains("expected_error")) {
    SPECDEC_EXPECT_STATUS(got, absl::StatusCode::kInvalidArgument,
                          c["expected_error"].get<std::string>());
    return;
  }
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, c["expected"].get<std::string>());
  if (c["extra"].is_null()) {
    // The plain-JSON overload gives the same text (these messages' keys are already sorted).
    const absl::StatusOr<std::string> plain =
        t.Render(nlohmann::json::parse(c["messages"].dump()), add_generation_prompt);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(*plain, c["expected"].get<std::string>());
  }
}

TEST(ChatTemplateTest, RealTemplatesRenderAsJinja2Does) {
  const ordered_json expected = Expected();
  int checked = 0;
  for (const auto& [name, info] : expected["templates"].items()) {
    SCOPED_TRACE(name);
    SPECDEC_ASSERT_OK_AND_ASSIGN(ChatTemplate t, LoadTemplate(expected, name));
    for (const ordered_json& c : expected["cases"]) {
      if (c["template"] != name) continue;
      SCOPED_TRACE(c["name"].get<std::string>());
      ExpectCase(t, c);
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(expected["cases"].size()));
  EXPECT_GE(checked, 20);
}

TEST(ChatTemplateTest, RendersFromManyThreadsAtOnce) {
  const ordered_json expected = Expected();
  SPECDEC_ASSERT_OK_AND_ASSIGN(const ChatTemplate t, LoadTemplate(expected, "qwen3"));
  const ordered_json& c = expected["cases"][1];
  ASSERT_EQ(c["template"], "qwen3");
  std::vector<std::string> outputs(8);
  std::vector<std::thread> threads;
  for (std::string& out : outputs) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) out = t.Render(c["messages"], true, c["extra"]).value_or("");
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& out : outputs) EXPECT_EQ(out, c["expected"].get<std::string>());
}

TEST(ChatTemplateTest, VariablesAndFunctions) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(
      ChatTemplate t,
      ChatTemplate::FromString("{{ bos_token }}{{ messages[0].content }}|{{ tools is defined }}|"
                               "{{ add_generation_prompt }}|{{ strftime_now('%Y-%m-%d %a') }}|"
                               "{{ messages[0].name }}{{ eos_token }}",
                               "<s>", "</s>"));
  t.set_clock(FixedClock(ordered_json::array({2024, 2, 29, 23, 59, 0})));
  const nlohmann::json messages = {{{"role", "user"}, {"content", "hi"}, {"name", "ann"}}};
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string out, t.Render(messages, false));
  EXPECT_EQ(out, "<s>hi|False|False|2024-02-29 Thu|ann</s>");

  SPECDEC_ASSERT_OK_AND_ASSIGN(
      std::string with_tools,
      t.Render(ordered_json(messages), true, ordered_json{{"tools", ordered_json::array()}}));
  EXPECT_EQ(with_tools, "<s>hi|True|True|2024-02-29 Thu|ann</s>");
}

TEST(ChatTemplateTest, ErrorsAreInvalidArgument) {
  SPECDEC_EXPECT_STATUS(
      ChatTemplate::FromString("ok\n{% for m in messages %}{{ m | bogus }}", "", ""),
      absl::StatusCode::kInvalidArgument, "line 2, column 31: unknown filter 'bogus'");
  SPECDEC_EXPECT_STATUS(ChatTemplate::FromString("{% extends 'base' %}", "", ""),
                        absl::StatusCode::kInvalidArgument,
                        "line 1, column 4: unsupported tag 'extends'");
  SPECDEC_ASSERT_OK_AND_ASSIGN(
      ChatTemplate t,
      ChatTemplate::FromString(
          "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with "
          "a user message.') }}{% endif %}{{ messages[0].content.upper() }}",
          "", ""));
  SPECDEC_EXPECT_STATUS(
      t.Render(nlohmann::json::parse(R"([{"role": "assistant", "content": "x"}])"), true),
      absl::StatusCode::kInvalidArgument, "Conversations must start with a user message.");
  SPECDEC_EXPECT_STATUS(t.Render(nlohmann::json::parse(R"([{"role": "user"}])"), true),
                        absl::StatusCode::kInvalidArgument,
                        "line 1: 'dict object' has no attribute 'content'");
  SPECDEC_EXPECT_STATUS(t.Render(nlohmann::json::object(), true),
                        absl::StatusCode::kInvalidArgument, "messages must be a JSON array");
  SPECDEC_EXPECT_STATUS(
      t.Render(ordered_json::array(), true, ordered_json{{"messages", ordered_json::array()}}),
      absl::StatusCode::kInvalidArgument, "'messages' is reserved");
}

// A fresh directory under the test's temporary directory.
class TokenizerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           (std::string("chat_template_test_") + info->name() + "_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(TokenizerConfigTest, NoChatTemplateIsNotFound) {
  const std::string path =
      Write("tokenizer_config.json", R"({"bos_token": "<s>", "eos_token": "</s>"})");
  SPECDEC_EXPECT_STATUS(ChatTemplate::FromTokenizerConfig(path), absl::StatusCode::kNotFound,
                        "the model ships no chat template");
  SPECDEC_EXPECT_STATUS(ChatTemplate::FromTokenizerConfig((dir_ / "absent.json").string()),
                        absl::StatusCode::kNotFound, "cannot read");
}

TEST_F(TokenizerConfigTest, MalformedConfigIsInvalidArgument) {
  SPECDEC_EXPECT_STATUS(ChatTemplate::FromTokenizerConfig(Write("tokenizer_config.json", "{oops")),
                        absl::StatusCode::kInvalidArgument, "is not a JSON object");
  SPECDEC_EXPECT_STATUS(
      ChatTemplate::FromTokenizerConfig(Write("tokenizer_config.json", R"({"chat_template": 3})")),
      absl::StatusCode::kInvalidArgument, "must be a string or a list");
  SPECDEC_EXPECT_STATUS(ChatTemplate::FromTokenizerConfig(
                            Write("tokenizer_config.json", R"({"chat_template": "{% if %}"})")),
                        absl::StatusCode::kInvalidArgument, "line 1, column 7");
}

TEST_F(TokenizerConfigTest, ListFormTakesDefaultElseFirst) {
  const nlohmann::json config = {
      {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
      {"eos_token", "</s>"},
      {"chat_template",
       {{{"name", "tool_use"}, {"template", "TOOLS {{ messages[0].content }}"}},
        {{"name", "default"},
         {"template", "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"}}}}};
  SPECDEC_ASSERT_OK_AND_ASSIGN(ChatTemplate t, ChatTemplate::FromTokenizerConfig(
                                                   Write("tokenizer_config.json", config.dump())));
  EXPECT_EQ(t.bos_token(), "<s>");
  EXPECT_EQ(t.eos_token(), "</s>");
  const nlohmann::json messages = {{{"role", "user"}, {"content", "hi"}}};
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string out, t.Render(messages, true));
  EXPECT_EQ(out, "<s>hi</s>");

  nlohmann::json no_default = config;
  no_default["chat_template"].erase(1);
  SPECDEC_ASSERT_OK_AND_ASSIGN(
      ChatTemplate first,
      ChatTemplate::FromTokenizerConfig(Write("tokenizer_config.json", no_default.dump())));
  SPECDEC_ASSERT_OK_AND_ASSIGN(std::string first_out, first.Render(messages, true));
  EXPECT_EQ(first_out, "TOOLS hi");
}

TEST_F(TokenizerConfigTest, StringFormWithARealTemplate) {
  const ordered_json expected = Expected();
  const nlohmann::json config = {{"chat_template", ReadText(DataDir() + "/llama3.jinja")},
                                 {"bos_token", "<|begin_of_text|>"},
                                 {"eos_token", "<|eot_id|>"}};
  SPECDEC_ASSERT_OK_AND_ASSIGN(ChatTemplate t, ChatTemplate::FromTokenizerConfig(
                                                   Write("tokenizer_config.json", config.dump())));
  for (const ordered_json& c : expected["cases"]) {
    if (c["template"] != "llama3" || c["name"] != "multi_turn") continue;
    SPECDEC_ASSERT_OK_AND_ASSIGN(std::string out, t.Render(c["messages"], true, c["extra"]));
    EXPECT_EQ(out, c["expected"].get<std::string>());
    return;
  }
  FAIL() << "expected.json has no llama3 multi_turn case";
}

TEST_F(TokenizerConfigTest, ChatTemplateJinjaNextToTheConfig) {
  Write("chat_template.jinja",
        "[{{ messages|length }}]{% if add_generation_prompt %}>{% endif %}\n");
  SPECDEC_ASSERT_OK_AND_ASSIGN(
      ChatTemplate t,
      ChatTemplate::FromTokenizerConfig(Write("tokenizer_config.json", R"({"eos_token": null})")));
  SPECDEC_ASSERT_OK_AND_ASSIGN(
      std::string out,
      t.Render(nlohmann::json::array({{{"role", "user"}, {"content", "x"}}}), true));
  EXPECT_EQ(out, "[1]>");
  EXPECT_EQ(t.eos_token(), "");
}

}  // namespace
}  // namespace specdec::chat
