// Helpers shared by the libFuzzer harnesses: inputs as files (the readers map files) and the
// repository's own checkpoints and templates, found through SPECDEC_SOURCE_DIR.
#ifndef SPECDEC_TESTS_FUZZ_FUZZ_UTIL_H_
#define SPECDEC_TESTS_FUZZ_FUZZ_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace specdec::fuzz {

// Writes the input to a per-process file in /dev/shm (tmpfs), else in $TMPDIR or /tmp, and
// returns its path.
inline std::string InputAsFile(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path = [suffix] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : tmp ? tmp : "/tmp";
    return dir + "/specdec-fuzz-" + std::to_string(::getpid()) + suffix;
  }();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// Reads a byte so that the compiler keeps the read (and the access a bad offset would fault on).
inline void Touch(uint8_t byte) { asm volatile("" : : "r"(byte) : "memory"); }

inline std::string ReadSourceFile(const std::string& relative) {
  std::ifstream in(std::string(SPECDEC_SOURCE_DIR) + "/" + relative, std::ios::binary);
  if (!in) std::abort();
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace specdec::fuzz

#endif  // SPECDEC_TESTS_FUZZ_FUZZ_UTIL_H_
