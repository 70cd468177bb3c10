#include "core/device.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/errors.h"

#if PSAR_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace psar {

namespace {
thread_local Device t_current = Device::kCpu;

#if PSAR_HAVE_CUDA
void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(err));
}
#else
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string(what) + ": this psar was built without CUDA");
}
#endif

size_t bytes(int64_t n, size_t element) {
  PSAR_CHECK(n >= 0, "negative element count ", n);
  return static_cast<size_t>(n) * element;
}

template <typename T>
T* alloc(Device device, int64_t n) {
  const size_t size = bytes(n > 0 ? n : 1, sizeof(T));
  if (device == Device::kCpu) {
    T* p = new T[static_cast<size_t>(n > 0 ? n : 1)]();
    return p;
  }
#if PSAR_HAVE_CUDA
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, size), "cudaMalloc");
  cuda_check(cudaMemset(p, 0, size), "cudaMemset");
  return static_cast<T*>(p);
#else
  (void)size;
  no_cuda("device_alloc");
#endif
}

template <typename T>
void release(Device device, T* data) noexcept {
  if (!data) return;
  if (device == Device::kCpu) {
    delete[] data;
    return;
  }
#if PSAR_HAVE_CUDA
  cudaFree(data);  // destructors never throw: best effort
#endif
}

template <typename T>
void copy(T* dst, Device dst_device, const T* src, Device src_device, int64_t n) {
  if (n == 0) return;
  if (dst_device == Device::kCpu && src_device == Device::kCpu) {
    std::memcpy(dst, src, bytes(n, sizeof(T)));
    return;
  }
#if PSAR_HAVE_CUDA
  // cudaMemcpyDefault: unified addressing tells the direction from the pointers.
  cuda_check(cudaMemcpy(dst, src, bytes(n, sizeof(T)), cudaMemcpyDefault), "cudaMemcpy");
#else
  no_cuda("device_copy");
#endif
}
}  // namespace

const char* to_string(Device device) { return device == Device::kCuda ? "cuda" : "cpu"; }

std::vector<std::string> device_names() {
  return {to_string(Device::kCpu), to_string(Device::kCuda)};
}

Device parse_device(const std::string& value, const std::string& key) {
  for (const Device d : {Device::kCpu, Device::kCuda})
    if (value == to_string(d)) return d;
  throw ConfigError(key + ": unknown device '" + value + "' (expected cpu or cuda)");
}

bool cuda_built() {
#if PSAR_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if PSAR_HAVE_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) return 0;
  return devices;
#else
  return 0;
#endif
}

std::string device_unavailable_reason(Device device) {
  if (device == Device::kCpu) return "";
  if (!cuda_built()) return "this psar was built without CUDA (CMake found no nvcc/NCCL)";
  if (cuda_device_count() == 0) return "no CUDA device is visible to this process";
  return "";
}

void require_device(Device device, const std::string& key) {
  const std::string reason = device_unavailable_reason(device);
  if (!reason.empty())
    throw ConfigError(key + ": " + to_string(device) + " cannot be used: " + reason);
}

int local_cuda_device() {
  const int devices = cuda_device_count();
  if (devices == 0) return 0;
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* s = std::getenv(v)) return std::atoi(s) % devices;
  return 0;
}

void use_cuda_device(int ordinal) {
#if PSAR_HAVE_CUDA
  cuda_check(cudaSetDevice(ordinal), "cudaSetDevice");
#else
  (void)ordinal;
  no_cuda("use_cuda_device");
#endif
}

int current_cuda_device() {
#if PSAR_HAVE_CUDA
  int ordinal = -1;
  if (cuda_device_count() == 0 || cudaGetDevice(&ordinal) != cudaSuccess) return -1;
  return ordinal;
#else
  return -1;
#endif
}

float* device_alloc(Device device, int64_t n) { return alloc<float>(device, n); }
void device_free(Device device, float* data) noexcept { release(device, data); }
int32_t* device_alloc_int(Device device, int64_t n) { return alloc<int32_t>(device, n); }
void device_free_int(Device device, int32_t* data) noexcept { release(device, data); }

void device_zero(Device device, float* data, int64_t n) {
  if (n == 0) return;
  if (device == Device::kCpu) {
    std::memset(data, 0, bytes(n, sizeof(float)));  // IEEE +0.0f is all zero bits
    return;
  }
#if PSAR_HAVE_CUDA
  cuda_check(cudaMemset(data, 0, bytes(n, sizeof(float))), "cudaMemset");
#else
  no_cuda("device_zero");
#endif
}

void device_copy(float* dst, Device dst_device, const float* src, Device src_device, int64_t n) {
  copy(dst, dst_device, src, src_device, n);
}
void device_copy(int32_t* dst, Device dst_device, const int32_t* src, Device src_device,
                 int64_t n) {
  copy(dst, dst_device, src, src_device, n);
}

void device_synchronize(Device device) {
  if (device == Device::kCpu) return;
#if PSAR_HAVE_CUDA
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
  no_cuda("device_synchronize");
#endif
}

float* pinned_alloc(int64_t n) {
#if PSAR_HAVE_CUDA
  void* p = nullptr;
  cuda_check(cudaMallocHost(&p, bytes(n > 0 ? n : 1, sizeof(float))), "cudaMallocHost");
  return static_cast<float*>(p);
#else
  return new float[static_cast<size_t>(n > 0 ? n : 1)]();
#endif
}

void pinned_free(float* data) noexcept {
  if (!data) return;
#if PSAR_HAVE_CUDA
  cudaFreeHost(data);
#else
  delete[] data;
#endif
}

Device current_device() { return t_current; }

DeviceScope::DeviceScope(Device device) : previous_(t_current) { t_current = device; }
DeviceScope::~DeviceScope() { t_current = previous_; }

}  // namespace psar
