#include "common/engine/prompt_lookup.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace specdec::engine {
namespace {

using V = std::vector<int32_t>;

// The lookup by its definition: each suffix length from the longest, each earlier start from the
// latest, compared token by token.
// `match` (when given) receives the matched suffix's length.
V ScanLookup(const V& tokens, int32_t max_n, int32_t min_n, int32_t length, int32_t min_length,
             int32_t* match = nullptr) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (match != nullptr) *match = 0;
  for (int64_t n = std::min<int64_t>(max_n, size - 1); n >= min_n; --n) {
    for (int64_t start = size - n - std::max(1, min_length); start >= 0; --start) {
      if (!std::equal(tokens.end() - n, tokens.end(), tokens.begin() + start)) continue;
      if (match != nullptr) *match = static_cast<int32_t>(n);
      const int64_t from = start + n;
      const int64_t take = std::min<int64_t>(length, size - from);
      return V(tokens.begin() + from, tokens.begin() + from + take);
    }
  }
  return {};
}

TEST(PromptLookupTest, TheLongestSuffixAtItsLatestOccurrenceWins) {
  // Suffix [1, 2, 3] occurs at 0 (followed by 4 5 6); [2, 3] also at 7 (followed by 9).
  const V tokens = {1, 2, 3, 4, 5, 6, 0, 2, 3, 9, 1, 2, 3};
  EXPECT_EQ(PromptLookup(tokens, 3, 1, 3), (V{4, 5, 6}));
  EXPECT_EQ(PromptLookup(tokens, 3, 1, 1), (V{4}));
  // Two occurrences of the 3-gram: the latest wins.
  const V longer = {1, 2, 3, 4, 1, 2, 3, 8, 1, 2, 3};
  EXPECT_EQ(PromptLookup(longer, 3, 1, 2), (V{8, 1}));
  // The match's length comes with the draft; a step's draft reports it too, 0 for none.
  LookupHistory h(tokens);
  int32_t match = -1;
  EXPECT_EQ(h.Lookup(3, 1, 3, 1, &match), (V{4, 5, 6}));
  EXPECT_EQ(match, 3);
  EXPECT_EQ(h.Lookup(2, 1, 3, 1, &match), (V{9, 1, 2}));
  EXPECT_EQ(match, 2);
  EXPECT_EQ(h.Draft(NgramLookup(2), 10, 100, &match), (V{4, 5}));
  EXPECT_EQ(match, 3);
  EXPECT_TRUE(h.Draft(NgramLookup(0), 10, 100, &match).empty());
  EXPECT_EQ(match, 0);
}

TEST(PromptLookupTest, NothingMatchesNothingIsDrafted) {
  EXPECT_TRUE(PromptLookup(V{1, 2, 3, 4}, 3, 1, 4).empty());
  EXPECT_TRUE(PromptLookup(V{5}, 3, 1, 4).empty());
  EXPECT_TRUE(PromptLookup(V{}, 3, 1, 4).empty());
  // A suffix below min_n does not count.
  EXPECT_TRUE(PromptLookup(V{4, 1, 2, 4}, 3, 2, 4).empty());
  EXPECT_EQ(PromptLookup(V{4, 1, 2, 4}, 3, 1, 4), (V{1, 2, 4}));
  // Nothing asked for: nothing drafted, whatever matches.
  EXPECT_TRUE(PromptLookup(V{4, 1, 2, 4}, 3, 1, 0).empty());
  EXPECT_TRUE(PromptLookup(V{4, 1, 2, 4}, 3, 1, -1).empty());
}

TEST(PromptLookupTest, AStepDraftsWhatTheRunAndTheContextLeave) {
  // Cached 10 11 12 13 10 11, row 0 = 12: [10, 11, 12] occurred at 0, followed by 13 10 11.
  const V sequence = {10, 11, 12, 13, 10, 11, 12};
  EXPECT_EQ(LookupDraft(sequence, NgramLookup(3), 100, 64), (V{13, 10, 11}));
  EXPECT_EQ(LookupDraft(sequence, NgramLookup(8), 100, 64), (V{13, 10, 11, 12}));
  // The step commits at most tokens_left: at most tokens_left - 1 drafted.
  EXPECT_EQ(LookupDraft(sequence, NgramLookup(3), 3, 64), (V{13, 10}));
  EXPECT_TRUE(LookupDraft(sequence, NgramLookup(3), 1, 64).empty());
  // Rows 0.. of the step sit at positions 6..: 8 positions leave row 0 and one draft row.
  EXPECT_EQ(LookupDraft(sequence, NgramLookup(3), 100, 8), (V{13}));
  EXPECT_TRUE(LookupDraft(sequence, NgramLookup(3), 100, 7).empty());
  // No lookup asked, nothing cached, nothing matching: none.
  EXPECT_TRUE(LookupDraft(sequence, NgramLookup(0), 100, 64).empty());
  EXPECT_TRUE(LookupDraft(V{}, NgramLookup(3), 100, 64).empty());
  EXPECT_TRUE(LookupDraft(V{1, 2, 3}, NgramLookup(3), 100, 64).empty());
}

TEST(PromptLookupTest, AdaptiveLookupsNeedTwoMatchedAndTwoDraftedTokens) {
  // Only the 1-token suffix [5] matches: NGRAM drafts, DFLASH_ADAPTIVE does not.
  const V one_match = {5, 6, 7, 8, 1, 5};
  EXPECT_EQ(LookupDraft(one_match, NgramLookup(4), 100, 64), (V{6, 7, 8, 1}));
  EXPECT_TRUE(LookupDraft(one_match, AdaptiveLookup(4), 100, 64).empty());
  // A 2-token match followed by one token only: too short for DFLASH_ADAPTIVE.
  const V short_tail = {4, 7, 7, 7};
  EXPECT_EQ(LookupDraft(short_tail, NgramLookup(4), 100, 64), (V{7}));
  EXPECT_TRUE(LookupDraft(short_tail, AdaptiveLookup(4), 100, 64).empty());
  // One more 7: the latest occurrence of [7, 7, 7] is followed by one token, the one before it by
  // two, which DFLASH_ADAPTIVE takes.
  const V longer_run = {4, 7, 7, 7, 7, 7};
  EXPECT_EQ(LookupDraft(longer_run, NgramLookup(4), 100, 64), (V{7}));
  EXPECT_EQ(LookupDraft(longer_run, AdaptiveLookup(4), 100, 64), (V{7, 7}));
  // A longer continuation cut to one token by what the run has left: too short as well.
  const V long_tail = {1, 2, 9, 1, 2};
  EXPECT_EQ(LookupDraft(long_tail, AdaptiveLookup(4), 100, 64), (V{9, 1, 2}));
  EXPECT_TRUE(LookupDraft(long_tail, AdaptiveLookup(4), 2, 64).empty());
  EXPECT_EQ(LookupDraft(long_tail, NgramLookup(4), 2, 64), (V{9}));
  // A shape of fewer than 2 tokens is no lookup (a target refuses min_tokens > max_tokens).
  EXPECT_EQ(AdaptiveLookup(1).max_tokens, 0);
  EXPECT_EQ(AdaptiveLookup(0).max_tokens, 0);
  EXPECT_EQ(AdaptiveLookup(2).min_tokens, 2);
  EXPECT_TRUE(LookupDraft(long_tail, AdaptiveLookup(1), 100, 64).empty());
}

TEST(LookupHistoryTest, KeptIndexFindsWhatAScanOfTheSequenceFinds) {
  // Tokens come (one at a time and in runs) and go (a step's row 0 looked up after, then taken
  // back), on few distinct tokens so that every suffix length matches often; the index built once
  // and kept must answer every lookup as a scan of the whole sequence does.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    LookupHistory h;
    V mirror;
    const int32_t vocab = 2 + trial % 5;
    int lookups = 0;
    for (int op = 0; op < 400; ++op) {
      const uint32_t what = rng() % 10;
      if (what < 5) {
        const int32_t t = static_cast<int32_t>(rng() % vocab);
        h.Append(t);
        mirror.push_back(t);
      } else if (what < 6) {
        V run(rng() % 4);
        for (int32_t& t : run) t = static_cast<int32_t>(rng() % vocab);
        h.Append(run);
        mirror.insert(mirror.end(), run.begin(), run.end());
      } else if (what < 7 && !mirror.empty()) {
        h.PopBack();
        mirror.pop_back();
      } else {
        const int32_t min_n = 1 + static_cast<int32_t>(rng() % 3);
        const int32_t length = 1 + static_cast<int32_t>(rng() % 6);
        const int32_t min_length = 1 + static_cast<int32_t>(rng() % 3);
        int32_t match = -1, scanned_match = -1;
        ASSERT_EQ(h.Lookup(kLookupMaxMatch, min_n, length, min_length, &match),
                  ScanLookup(mirror, kLookupMaxMatch, min_n, length, min_length, &scanned_match))
            << "trial " << trial << " op " << op;
        ASSERT_EQ(match, scanned_match) << "trial " << trial << " op " << op;
        // A step's draft after a row 0 that is not kept: as on a sequence that ends with it.
        const int32_t row0 = static_cast<int32_t>(rng() % vocab);
        const LookupShape shape{1 + static_cast<int32_t>(rng() % 5), min_n, min_length};
        const int32_t left = 1 + static_cast<int32_t>(rng() % 8);
        const int64_t context = static_cast<int64_t>(mirror.size()) + 1 + rng() % 8;
        V with_row0 = mirror;
        with_row0.push_back(row0);
        int32_t after_match = -1, whole_match = -1;
        ASSERT_EQ(h.DraftAfter(row0, shape, left, context, &after_match),
                  LookupHistory(with_row0).Draft(shape, left, context, &whole_match))
            << "trial " << trial << " op " << op;
        ASSERT_EQ(after_match, whole_match) << "trial " << trial << " op " << op;
        ++lookups;
      }
      ASSERT_EQ(V(h.tokens().begin(), h.tokens().end()), mirror);
    }
    EXPECT_GT(lookups, 50);
  }
}

TEST(LookupHistoryTest, AssignStartsOverAndAStepsRowZeroComesAndGoes) {
  LookupHistory h(V{9, 9, 9});
  EXPECT_EQ(h.Lookup(3, 1, 4), (V{9}));
  h.Assign(V{10, 11, 12, 13, 10, 11});
  EXPECT_EQ(h.size(), 6);
  // Row 0 = 12 looked up after the cached tokens, then taken back as a verify would.
  h.Append(12);
  EXPECT_EQ(h.Draft(NgramLookup(3), 100, 64), (V{13, 10, 11}));
  h.PopBack();
  // The same without keeping row 0.
  EXPECT_EQ(h.DraftAfter(12, NgramLookup(3), 100, 64), (V{13, 10, 11}));
  EXPECT_EQ(h.size(), 6);
  h.Append(99);
  EXPECT_TRUE(h.Draft(NgramLookup(3), 100, 64).empty());
  EXPECT_EQ(V(h.tokens().begin(), h.tokens().end()), (V{10, 11, 12, 13, 10, 11, 99}));
}

}  // namespace
}  // namespace specdec::engine
