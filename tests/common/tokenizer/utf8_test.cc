// UTF-8 helpers: ill-formed text made well-formed the way Python's errors="replace" does.
#include "common/tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace specdec::tokenizer {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

TEST(Utf8Test, WellFormedTextIsKept) {
  for (const std::string text :
       {"", "plain ascii", "caf\xC3\xA9", "\xE2\x82\xAC 5", "\xF0\x9F\x98\x80!"}) {
    EXPECT_EQ(ValidUtf8(text), text);
  }
}

// Each maximal subpart becomes one U+FFFD; the expected strings are what Python 3 gives for
// bytes(...).decode("utf-8", errors="replace").
TEST(Utf8Test, EachMaximalSubpartBecomesOneReplacementCharacter) {
  const std::string r = kReplacement;
  struct Case {
    std::string in, want;
  };
  for (const Case& c : {
           Case{"\x80", r},  // a lone continuation byte
           Case{"a\x80\xBF"
                "b",
                "a" + r + r + "b"},  // each stray continuation byte alone
           Case{"\xC0\xAF", r + r},  // overlong lead: never a character
           Case{"\xE2\x82"
                "A",
                r + "A"},        // a 3-byte start cut short: one unit
           Case{"\xE2\x82", r},  // ... also at the end of the text
           Case{"\xF0\x9F\x98"
                "x",
                r + "x"},                    // a 4-byte start cut short
           Case{"\xED\xA0\x80", r + r + r},  // a surrogate: the second byte is out
           Case{"\xF5\x80", r + r},          // beyond U+10FFFF
           Case{"\xFF"
                "ok\xC3\xA9",
                r + "ok\xC3\xA9"},  // the rest stays as it was
       }) {
    const std::string got = ValidUtf8(c.in);
    EXPECT_EQ(got, c.want) << "input of " << c.in.size() << " bytes";
    EXPECT_TRUE(IsValidUtf8(got));
  }
}

}  // namespace
}  // namespace specdec::tokenizer
