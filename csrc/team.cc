#include "team.h"

#include <pthread.h>

#include <cstdlib>
#include <new>

namespace fusedrnn {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

constexpr int kBarrierSpins = 4000;   // ≈ 10-40 µs before sleeping
constexpr int kJobSpins = 100000;     // ≈ 2-6 ms: workers wait longer for the next call (waking a sleeping
                                      // vCPU took up to 8 ms on the VMs we measured)

class Alone final : public Sync {
 public:
  void wait() override {}
};

}  // namespace

void SpinBarrier::wait() {
  if (participants_ <= 1) return;
  const unsigned generation = generation_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == participants_ - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(mutex_); }
      wake_.notify_all();
    }
    return;
  }
  for (int i = 0; i < kBarrierSpins; ++i) {
    if (generation_.load(std::memory_order_acquire) != generation) return;
    cpu_relax();
  }
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != generation; });
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

namespace {
std::atomic<Team*> current_team{nullptr};
}  // namespace

void Team::replace_after_fork() { current_team.store(new Team(), std::memory_order_release); }

Team& Team::instance() {
  // Never destroyed: the workers sleep until the process exits.
  static const bool created = [] {
    current_team.store(new Team(), std::memory_order_release);
    pthread_atfork(nullptr, nullptr, &Team::replace_after_fork);
    return true;
  }();
  (void)created;
  return *current_team.load(std::memory_order_acquire);
}

void Team::ensure_workers(int count) {
  while (int(workers_.size()) < count) {
    const int index = int(workers_.size());
    workers_.emplace_back([this, index] { worker_loop(index); });
    workers_.back().detach();
  }
}

void Team::worker_loop(int index) {
  unsigned seen = 0;
  for (;;) {
    for (int i = 0; i < kJobSpins && job_generation_.load(std::memory_order_acquire) == seen; ++i)
      cpu_relax();
    // The generation and the job's fields are read together under the lock: a worker that
    // slept through a job it was not part of picks up the latest job exactly once.
    std::unique_lock<std::mutex> lock(job_mutex_);
    job_ready_.wait(lock, [&] { return job_generation_.load(std::memory_order_acquire) != seen; });
    seen = job_generation_.load(std::memory_order_acquire);
    const int threads = job_threads_;
    JobFunction job = job_;
    void* context = context_;
    lock.unlock();
    if (index + 1 < threads) {
      job(context, index + 1, threads, &barrier_);
      barrier_.wait();  // the job's end
    }
  }
}

void Team::run(int threads, JobFunction job, void* context) {
  std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
  if (threads <= 1 || !busy.owns_lock()) {
    Alone alone;
    job(context, 0, 1, &alone);
    return;
  }
  ensure_workers(threads - 1);
  barrier_.reset(threads);
  {
    std::lock_guard<std::mutex> lock(job_mutex_);
    job_ = job;
    context_ = context;
    job_threads_ = threads;
    job_generation_.fetch_add(1, std::memory_order_release);
  }
  job_ready_.notify_all();
  job(context, 0, threads, &barrier_);
  barrier_.wait();  // the job's end: every participant is done with `context`
}

void run_team(int threads, JobFunction job, void* context) { Team::instance().run(threads, job, context); }


}  // namespace fusedrnn
