// GPU driver, CUDA versions and devices, probed at run time. See fact_sections.h.
//
// Nothing here links against CUDA: libcuda (the driver API) and libcudart (the runtime) are
// opened with dlopen if present. The few entry points used have had stable C signatures since
// CUDA 4; they are declared here as function-pointer types rather than taken from cuda.h, so that
// the build needs no CUDA headers.
#include <dlfcn.h>

#include <nlohmann/json.hpp>

#include <string>

#include "preflight/fact_sections.h"
#include "preflight/proc_files.h"

namespace kiln::preflight {
namespace {

using CuInitFn = int (*)(unsigned int);
using CuDriverGetVersionFn = int (*)(int*);
using CuDeviceGetCountFn = int (*)(int*);
using CuDeviceGetFn = int (*)(int*, int);
using CuDeviceGetNameFn = int (*)(char*, int, int);
using CuDeviceTotalMemFn = int (*)(size_t*, int);
using CudaRuntimeGetVersionFn = int (*)(int*);

// CUDA encodes versions as 1000 * major + 10 * minor: 12040 -> "12.4".
std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 ..." -> "550.54.14".
nlohmann::ordered_json nvidia_driver_version() {
  std::optional<std::string> text = read_trimmed("/proc/driver/nvidia/version");
  if (!text) return nullptr;
  const std::string marker = "Kernel Module";
  size_t pos = text->find(marker);
  if (pos == std::string::npos) return nullptr;
  pos = text->find_first_not_of(' ', pos + marker.size());
  if (pos == std::string::npos) return nullptr;
  const size_t end = text->find(' ', pos);
  return text->substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

void* open_first(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
  }
  return nullptr;
}

}  // namespace

nlohmann::ordered_json gpu_facts() {
  nlohmann::ordered_json gpu;
  gpu["driver_version"] = nvidia_driver_version();
  gpu["cuda_driver_version"] = nullptr;
  gpu["cuda_runtime_version"] = nullptr;
  gpu["devices"] = nullptr;

  // Handles stay open for the life of the process: unloading the CUDA driver is not safe.
  if (void* cuda = open_first({"libcuda.so.1", "libcuda.so"})) {
    auto cu_init = reinterpret_cast<CuInitFn>(dlsym(cuda, "cuInit"));
    auto get_version = reinterpret_cast<CuDriverGetVersionFn>(dlsym(cuda, "cuDriverGetVersion"));
    auto get_count = reinterpret_cast<CuDeviceGetCountFn>(dlsym(cuda, "cuDeviceGetCount"));
    auto get_device = reinterpret_cast<CuDeviceGetFn>(dlsym(cuda, "cuDeviceGet"));
    auto get_name = reinterpret_cast<CuDeviceGetNameFn>(dlsym(cuda, "cuDeviceGetName"));
    auto total_mem = reinterpret_cast<CuDeviceTotalMemFn>(dlsym(cuda, "cuDeviceTotalMem_v2"));
    int version = 0;
    if (get_version != nullptr && get_version(&version) == 0) {
      gpu["cuda_driver_version"] = cuda_version_string(version);
    }
    int count = 0;
    if (cu_init != nullptr && get_count != nullptr && cu_init(0) == 0 && get_count(&count) == 0) {
      nlohmann::ordered_json devices = nlohmann::ordered_json::array();
      for (int i = 0; i < count; ++i) {
        nlohmann::ordered_json device;
        device["index"] = i;
        int handle = 0;
        char name[256] = {0};
        size_t bytes = 0;
        const bool have_handle = get_device != nullptr && get_device(&handle, i) == 0;
        device["name"] =
            (have_handle && get_name != nullptr && get_name(name, sizeof(name), handle) == 0)
                ? nlohmann::ordered_json(name)
                : nlohmann::ordered_json(nullptr);
        device["memory_bytes"] =
            (have_handle && total_mem != nullptr && total_mem(&bytes, handle) == 0)
                ? nlohmann::ordered_json(bytes)
                : nlohmann::ordered_json(nullptr);
        devices.push_back(device);
      }
      gpu["devices"] = devices;
    }
  }
  if (void* cudart = open_first({"libcudart.so", "libcudart.so.13", "libcudart.so.12"})) {
    auto get_version =
        reinterpret_cast<CudaRuntimeGetVersionFn>(dlsym(cudart, "cudaRuntimeGetVersion"));
    int version = 0;
    if (get_version != nullptr && get_version(&version) == 0) {
      gpu["cuda_runtime_version"] = cuda_version_string(version);
    }
  }
  return gpu;
}

}  // namespace kiln::preflight
