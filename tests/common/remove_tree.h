// Removes a test's scratch directory with POSIX nftw() rather than std::filesystem::remove_all.
// Test binaries linked against a PyTorch 2.x wheel's libtorch crashed inside remove_all (a call
// to address 0): the wheel's libtorch_cpu.so exports its own copies of libstdc++'s
// std::filesystem iterator internals (pytorch/pytorch#133437).
#ifndef SPECDEC_TESTS_COMMON_REMOVE_TREE_H_
#define SPECDEC_TESTS_COMMON_REMOVE_TREE_H_

#include <ftw.h>

#include <cstdio>
#include <string>

namespace specdec::testing_util {

inline void RemoveTree(const std::string& dir) {
  nftw(
      dir.c_str(),
      [](const char* path, const struct stat*, int, struct FTW*) { return std::remove(path); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

}  // namespace specdec::testing_util

#endif  // SPECDEC_TESTS_COMMON_REMOVE_TREE_H_
