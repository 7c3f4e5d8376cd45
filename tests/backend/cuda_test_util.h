// Helpers shared by the CUDA backend's tests.
#pragma once
#include <string>

#include "backend/cuda/driver.h"
#include "tensorgrad/errors.h"

namespace tg::testing {

/// Whether NVRTC loads here (the compile tests need no GPU); `why` says why not.
inline bool have_nvrtc(std::string& why) {
  try {
    tg::backend::cuda::nvrtc();
    return true;
  } catch (const DeviceError& e) {
    why = e.what();
    return false;
  }
}

}  // namespace tg::testing
