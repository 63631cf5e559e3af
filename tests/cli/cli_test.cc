// End-to-end checks of the `specdec` binary: GGUF conversion, then greedy generation from BOS on
// the real pretrained stories260K must print exactly the text its authors published.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr (captured through a file)
};

RunResult RunCli(const std::string& args) {
  const fs::path err_file =
      fs::temp_directory_path() / ("specdec_cli_err_" + std::to_string(::getpid()));
  const std::string cmd = std::string(SPECDEC_CLI) + " " + args + " 2>" + err_file.string();
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  fs::remove(err_file);
  return r;
}

const fs::path kStories = fs::path(SPECDEC_SHARED_DIR) / "models/stories260K";

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The greedy sample in the upstream doc: the lines after the `./run ... -t 0.0` command.
std::string ExpectedGreedyText() {
  std::ifstream in(kStories / "stories260K.upstream-doc.md");
  std::string line, text;
  bool in_block = false;
  while (std::getline(in, line)) {
    if (!in_block && line.find("./run stories260K/stories260K.bin") != std::string::npos &&
        line.find("-t 0.0") != std::string::npos) {
      in_block = true;
      continue;
    }
    if (in_block) {
      if (line.rfind("```", 0) == 0) break;
      text += line + "\n";
    }
  }
  return text;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kStories / "stories260K.gguf")) {
      GTEST_SKIP() << "../shared/models/stories260K is absent; the golden test needs it";
    }
    dir_ = fs::temp_directory_path() / ("specdec_cli_" + std::to_string(::getpid()));
    RunResult conv =
        RunCli("convert " + (kStories / "stories260K.gguf").string() + " -o " + dir_.string());
    ASSERT_EQ(conv.exit_code, 0) << conv.err;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CliTest, GreedyFromBosPrintsThePublishedText) {
  const std::string expected = ExpectedGreedyText();
  ASSERT_GT(expected.size(), 500u) << "could not find the greedy sample in the upstream doc";
  // llama2.c's run.c generates 256 tokens after BOS by default (steps=256) and stops early only at
  // BOS.
  RunResult gen = RunCli("generate -m " + dir_.string() + " -n 256 --ignore-eos --threads 1");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  // Compare as far as the published text goes; print the first divergence if any.
  size_t i = 0;
  while (i < expected.size() && i < gen.out.size() && expected[i] == gen.out[i]) ++i;
  EXPECT_EQ(i, expected.size()) << "diverges at byte " << i
                                << "\nexpected: " << expected.substr(i, 80)
                                << "\ngot:      " << gen.out.substr(i, 80);
  EXPECT_NE(gen.err.find("tokens/s"), std::string::npos) << gen.err;
}

TEST_F(CliTest, PromptTextAndIdsAgree) {
  RunResult a = RunCli("generate -m " + dir_.string() + " -p 'Once upon a time' -n 20");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_FALSE(a.out.empty());
  // Token ids of "Once upon a time" with BOS, as the tokenizer prints them back.
  RunResult ids =
      RunCli("generate -m " + dir_.string() + " -p 'Once upon a time' -n 20 --print-ids");
  ASSERT_EQ(ids.exit_code, 0);
  EXPECT_EQ(a.out, ids.out);
}

TEST_F(CliTest, BenchComparesMethodsAgainstArInOneRun) {
  const fs::path prompts = dir_ / "prompts.txt";
  std::ofstream(prompts) << "Once upon a time, there was a dog.\n\nLily went to the park and\n";
  const fs::path json = dir_ / "bench.json";
  RunResult r =
      RunCli("bench --target " + dir_.string() + " --self-draft --prompts " + prompts.string() +
             " -n 24 --draft-length 3 --methods DRAFT_CHAIN,DYSPEC_TREE"
             " --json " +
             json.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("DRAFT_CHAIN"), std::string::npos) << r.out;
  const std::string j = ReadText(json);
  // Every method's greedy output equals AR's on both prompts, and self-drafting accepts every
  // draft token of the chain (tau = K + 1 = 4 until the length cap).
  EXPECT_NE(j.find("\"matches_ar\": 2"), std::string::npos) << j;
  EXPECT_NE(j.find("\"method\": \"DYSPEC_TREE\""), std::string::npos) << j;
  RunResult missing = RunCli("bench --target " + dir_.string() + " --prompts /nonexistent.jsonl");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("/nonexistent.jsonl"), std::string::npos) << missing.err;
}

TEST_F(CliTest, BenchSamplesKeepEachRequestAndSurviveBrokenUtf8) {
  // A prompt (or a completion cut at the token limit) need not be valid UTF-8: the samples file
  // writes such bytes as U+FFFD instead of aborting the run.
  const fs::path prompts = dir_ / "prompts.txt";
  std::ofstream(prompts) << "Once upon a time \xE2. there was a cat\n";
  const fs::path samples = dir_ / "samples.json";
  RunResult r =
      RunCli("bench --target " + dir_.string() + " --self-draft --prompts " + prompts.string() +
             " -n 16 --draft-length 3 --methods DRAFT_CHAIN" + " --samples " + samples.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string j = ReadText(samples);
  EXPECT_NE(j.find("time \xEF\xBF\xBD."), std::string::npos) << j;
  EXPECT_NE(j.find("\"method\": \"DRAFT_CHAIN\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"verify_steps\": "), std::string::npos) << j;
  EXPECT_NE(j.find("\"drafted_tokens\": "), std::string::npos) << j;
  EXPECT_NE(j.find("\"total_ms\": "), std::string::npos) << j;
}

TEST_F(CliTest, BadInputGivesClearErrors) {
  RunResult bad_ids = RunCli("generate -m " + dir_.string() + " --prompt-ids 1,99999");
  EXPECT_NE(bad_ids.exit_code, 0);
  EXPECT_NE(bad_ids.err.find("99999"), std::string::npos) << bad_ids.err;
  RunResult not_int = RunCli("generate -m " + dir_.string() + " --prompt-ids 1,x");
  EXPECT_NE(not_int.exit_code, 0);
  EXPECT_NE(not_int.err.find("not an integer"), std::string::npos) << not_int.err;
  RunResult no_model = RunCli("generate -m /nonexistent/dir");
  EXPECT_NE(no_model.exit_code, 0);
  RunResult bad_gguf =
      RunCli("convert " + (kStories / "tok512.bin").string() + " -o " + (dir_ / "bad").string());
  EXPECT_NE(bad_gguf.exit_code, 0);
  EXPECT_NE(bad_gguf.err.find("tok512.bin"), std::string::npos) << bad_gguf.err;
  RunResult help = RunCli("generate --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--max-new-tokens"), std::string::npos);
}

}  // namespace
