// The CUDA Driver API loader without a GPU: a missing library, a library
// that is not libcuda, and the emulator (emulator/), whose device the
// environment controls.
#include "attnc/runtime/cuda/CudaDriver.h"

#include <catch2/catch.hpp>

#include <cstdlib>

using namespace attnc::rt;
using namespace attnc::rt::cuda;

TEST_CASE("a missing driver library is 'no CUDA driver'", "[cuda]") {
  std::unique_ptr<Driver> d;
  Status s = Driver::open(d, "/nonexistent/libcuda.so.1");
  CHECK(s.code() == StatusCode::Unavailable);
  CHECK(s.message().rfind("no CUDA driver: cannot open "
                          "'/nonexistent/libcuda.so.1' (",
                          0) == 0);
}

TEST_CASE("a library that is not libcuda is refused by name", "[cuda]") {
  std::unique_ptr<Driver> d;
  Status s = Driver::open(d, ATTNC_NOT_CUDA_PATH);
  CHECK(s.message() == std::string("no CUDA driver: '") + ATTNC_NOT_CUDA_PATH +
                           "' has no symbol 'cuDriverGetVersion' (is it "
                           "libcuda?)");
}

TEST_CASE("cuInit's failure is reported with the driver's words", "[cuda]") {
  setenv("ATTNC_EMU_INIT_ERROR", "100", 1);
  std::unique_ptr<Driver> d;
  Status s = Driver::open(d, ATTNC_EMUCUDA_PATH);
  unsetenv("ATTNC_EMU_INIT_ERROR");
  CHECK(s.message() == "no CUDA driver: cuInit failed: CUDA_ERROR_NO_DEVICE "
                       "(no CUDA-capable device is detected)");
}

TEST_CASE("zero devices is 'no CUDA device'", "[cuda]") {
  setenv("ATTNC_EMU_DEVICES", "0", 1);
  std::unique_ptr<Driver> d;
  REQUIRE(Driver::open(d, ATTNC_EMUCUDA_PATH).isOk());
  std::unique_ptr<Device> dev;
  Status s = Device::open(*d, 0, dev);
  unsetenv("ATTNC_EMU_DEVICES");
  CHECK(s.message() == "no CUDA device: the driver reports 0 devices");
}

TEST_CASE("a device opens with its name and compute capability", "[cuda]") {
  std::unique_ptr<Driver> d;
  REQUIRE(Driver::open(d, ATTNC_EMUCUDA_PATH).isOk());
  CHECK(d->version() == 13000);
  std::unique_ptr<Device> dev;
  REQUIRE(Device::open(*d, 0, dev).isOk());
  CHECK(dev->name() == "attnc-emucuda");
  CHECK(dev->computeCapability() == 90);
  std::unique_ptr<Device> none;
  CHECK(Device::open(*d, 3, none).message() ==
        "CUDA device 3 does not exist (1 device(s))");
}

TEST_CASE("failed calls carry the call, the error name and its text",
          "[cuda]") {
  std::unique_ptr<Driver> d;
  REQUIRE(Driver::open(d, ATTNC_EMUCUDA_PATH).isOk());
  CUmodule m = nullptr;
  Status s = d->check(d->api().cuModuleLoadDataEx(&m, "not ptx", 0, nullptr,
                                                  nullptr),
                      "cuModuleLoadDataEx");
  CHECK(s.message() == "cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX (a "
                       "PTX JIT compilation failed)");
  CHECK(d->check(0, "anything").isOk());
}

TEST_CASE("ATTNC_LIBCUDA picks the library", "[cuda]") {
  setenv("ATTNC_LIBCUDA", "/nowhere/libcuda-test.so", 1);
  std::unique_ptr<Driver> d;
  Status s = Driver::open(d);
  unsetenv("ATTNC_LIBCUDA");
  CHECK(s.message().find("'/nowhere/libcuda-test.so'") != std::string::npos);
}
