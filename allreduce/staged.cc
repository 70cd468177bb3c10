#include "allreduce/staged.h"

#include "core/device.h"

namespace psar {

namespace {

class StagedAllreducer final : public Allreducer {
 public:
  explicit StagedAllreducer(std::unique_ptr<Allreducer> algorithm)
      : algorithm_(std::move(algorithm)), cuda_device_(current_cuda_device()) {}
  ~StagedAllreducer() override { pinned_free(host_); }

  std::string name() const override { return algorithm_->name(); }

  void allreduce(Comm& comm, std::span<float> data) override {
    const auto n = static_cast<int64_t>(data.size());
    // The device of the thread that built it: an overlap's communication
    // thread has not chosen one.
    if (cuda_device_ >= 0) use_cuda_device(cuda_device_);
    if (n > capacity_) {
      pinned_free(host_);
      host_ = nullptr;
      host_ = pinned_alloc(n);
      capacity_ = n;
    }
    // cudaMemcpy orders the copy after the kernels that produced the
    // gradients (the legacy default stream), whichever thread calls it.
    device_copy(host_, Device::kCpu, data.data(), Device::kCuda, n);
    {
      const DeviceScope on_host(Device::kCpu);  // the algorithm's reductions run on the host
      algorithm_->allreduce(comm, {host_, data.size()});
    }
    device_copy(data.data(), Device::kCuda, host_, Device::kCpu, n);
  }

 private:
  std::unique_ptr<Allreducer> algorithm_;
  int cuda_device_;
  float* host_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<Allreducer> stage_through_host(std::unique_ptr<Allreducer> algorithm) {
  return std::make_unique<StagedAllreducer>(std::move(algorithm));
}

}  // namespace psar
