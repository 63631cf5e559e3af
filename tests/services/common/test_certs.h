// The TLS tests' certificates, made by openssl (make_test_certs.sh) once per process in a
// directory of its own: ctest runs each test case in its own process, at once.
#ifndef SPECDEC_TESTS_SERVICES_COMMON_TEST_CERTS_H_
#define SPECDEC_TESTS_SERVICES_COMMON_TEST_CERTS_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace specdec::testing_util {

// The directory holding ca, other_ca, server, other_server, client, other_client and
// expired_client (.pem and .key), named after `prefix`; made on the first call.
inline const std::string& TestCertDir(const std::string& prefix) {
  static const std::string* dir = [&] {
    auto* d =
        new std::string(::testing::TempDir() + "/" + prefix + "." + std::to_string(::getpid()));
    const std::string cmd = "rm -rf '" + *d + "' && mkdir -p '" + *d + "' && bash '" +
                            SPECDEC_SOURCE_DIR "/tests/services/common/make_test_certs.sh' '" + *d +
                            "'";
    if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "failed: " << cmd;
    return d;
  }();
  return *dir;
}

}  // namespace specdec::testing_util

#endif  // SPECDEC_TESTS_SERVICES_COMMON_TEST_CERTS_H_
