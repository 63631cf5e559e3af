#include "common/engine/stop_rule.h"

#include <algorithm>

namespace specdec::engine {

TextStop::TextStop(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : decoder_(tokenizer) {
  for (std::string& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

// The longest suffix of the held text that is a proper prefix of some stop string.
size_t TextStop::HeldBack() const {
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  return keep;
}

std::string TextStop::Push(int32_t token) {
  if (matched()) return {};
  held_ += decoder_.Push(token);
  size_t first = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  const size_t release = held_.size() - HeldBack();
  std::string out = held_.substr(0, release);
  held_.erase(0, release);
  return out;
}

std::string TextStop::Flush() {
  if (matched()) return {};
  std::string out = std::move(held_);
  held_.clear();
  return out + decoder_.Flush();
}

StopRule::StopRule(int32_t max_tokens, std::span<const int32_t> stop_token_ids,
                   std::unique_ptr<TextStop> text)
    : max_tokens_(max_tokens),
      stop_token_ids_(stop_token_ids.begin(), stop_token_ids.end()),
      text_(std::move(text)) {}

StopRule::~StopRule() = default;

bool StopRule::IsStop(int32_t token) const {
  return std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token) != stop_token_ids_.end();
}

size_t StopRule::Take(std::span<const int32_t> committed, std::string* text) {
  size_t n = 0;
  for (int32_t t : committed) {
    if (finished()) break;
    if (IsStop(t)) {
      stopped_ = true;
      stop_token_ = t;
      break;
    }
    ++kept_;
    ++n;
    if (text_ == nullptr) continue;
    std::string piece = text_->Push(t);
    if (text) *text += piece;
    if (text_->matched()) stopped_ = true;
  }
  return n;
}

std::string StopRule::FlushText() { return text_ ? text_->Flush() : std::string(); }

}  // namespace specdec::engine
