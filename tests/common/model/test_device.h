// The device a test runs the model on: SPECDEC_TEST_DEVICE, else the test's own default.
#ifndef SPECDEC_TESTS_COMMON_MODEL_TEST_DEVICE_H_
#define SPECDEC_TESTS_COMMON_MODEL_TEST_DEVICE_H_

#include <gtest/gtest.h>

#include <cstdlib>

#include "common/model/transformer.h"

namespace specdec::model::testing {

// A name that is not a usable device fails the test, which then runs on the CPU.
inline c10::Device TestDevice(const char* default_device) {
  const char* env = std::getenv("SPECDEC_TEST_DEVICE");
  auto device = LoadOptions::ParseDevice(env != nullptr ? env : default_device);
  if (!device.ok()) {
    ADD_FAILURE() << "SPECDEC_TEST_DEVICE or the test's default names no usable device: "
                  << device.status();
    return c10::kCPU;
  }
  return *device;
}

}  // namespace specdec::model::testing

#endif  // SPECDEC_TESTS_COMMON_MODEL_TEST_DEVICE_H_
