#pragma once
// Device: where tensors, the parameter and gradient arenas and the optimizer
// state live (train.device: cpu | cuda). CPU memory is plain host memory;
// CUDA memory comes from cudaMalloc and is never touched element by element on
// the host. In a build without CUDA (see the top-level CMakeLists) every CUDA
// entry point throws an Error that says so, and cuda_device_count() is 0.
//
// The ops (core/ops.h) take raw pointers, so they cannot see where a buffer
// lives: they run on this thread's current device, set with DeviceScope by
// whoever owns the buffers (the trainer, for the rank's threads). That is one
// thread-local read and one branch per op call; the CPU path is unchanged.

#include <cstdint>
#include <string>
#include <vector>

namespace psar {

enum class Device { kCpu, kCuda };

const char* to_string(Device device);
// Parses "cpu" or "cuda"; a ConfigError names `key` and the bad value.
Device parse_device(const std::string& value, const std::string& key);
// Every device by name (the schema's choices for train.device).
std::vector<std::string> device_names();

// True when this binary was built with CUDA (PSAR_HAVE_CUDA).
bool cuda_built();
// CUDA devices this process can use: 0 without a CUDA build, a driver or a device.
int cuda_device_count();
// Why `device` cannot be used here ("" when it can), e.g. "this psar was built
// without CUDA" or "no CUDA device is visible".
std::string device_unavailable_reason(Device device);
// Throws a ConfigError naming `key` when `device` cannot be used here.
void require_device(Device device, const std::string& key);

// The CUDA device of this process: its node-local rank (Open MPI, MPICH or
// Slurm's variable; 0 without one) modulo the visible devices.
int local_cuda_device();
// cudaSetDevice for the calling thread.
void use_cuda_device(int ordinal);
// The calling thread's CUDA device (cudaGetDevice); -1 where none can be used.
int current_cuda_device();

// ---- memory ---------------------------------------------------------------------
// Zero-filled storage for n floats on `device`; release with device_free.
float* device_alloc(Device device, int64_t n);
void device_free(Device device, float* data) noexcept;
void device_zero(Device device, float* data, int64_t n);
// Copies n floats between any two devices (synchronous with respect to the host).
void device_copy(float* dst, Device dst_device, const float* src, Device src_device, int64_t n);
// Same, for int32 (targets, token ids).
void device_copy(int32_t* dst, Device dst_device, const int32_t* src, Device src_device,
                 int64_t n);
int32_t* device_alloc_int(Device device, int64_t n);
void device_free_int(Device device, int32_t* data) noexcept;
// Waits for every kernel this thread queued (a no-op on the CPU).
void device_synchronize(Device device);

// Page-locked host memory for staging copies to and from a CUDA device
// (plain host memory in a build without CUDA).
float* pinned_alloc(int64_t n);
void pinned_free(float* data) noexcept;

// ---- the ops' device --------------------------------------------------------------
Device current_device();
// Sets this thread's current device for its lifetime; restores the old one after.
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device previous_;
};

}  // namespace psar
