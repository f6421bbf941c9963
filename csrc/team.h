// The engine's persistent thread team and its per-step barrier.
//
// One team per process.  A job runs on the caller (thread 0) plus n-1 workers; between steps the
// threads meet at a barrier that spins briefly (the other threads are a few hundred ns away
// when the cores are ours) and then sleeps on a condition variable (when the machine is
// oversubscribed, spinning would steal the core from the thread being waited for).  Workers
// sleep between jobs.  A mutex admits one job at a time; a caller that finds the team busy runs
// its job alone, which gives the same bits (the kernels' results do not depend on the team size).
// In a child process made by fork() the team's threads do not exist: the child gets a new,
// empty team (the old one, whose mutexes may have been held at the fork, is abandoned).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "engine.h"

namespace fusedrnn {

class SpinBarrier final : public Sync {
 public:
  void reset(int participants) { participants_ = participants; }
  void wait() override;

 private:
  int participants_ = 1;
  std::atomic<int> arrived_{0};
  std::atomic<unsigned> generation_{0};
  std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
};

class Team {
 public:
  static Team& instance();
  void run(int threads, JobFunction job, void* context);

 private:
  Team() = default;
  static void replace_after_fork();  // pthread_atfork child handler: the workers did not fork
  void ensure_workers(int count);
  void worker_loop(int index);

  std::mutex busy_;        // held for the whole of a job
  std::mutex job_mutex_;   // guards the fields below for sleeping workers
  std::condition_variable job_ready_;
  std::atomic<unsigned> job_generation_{0};
  JobFunction job_ = nullptr;
  void* context_ = nullptr;
  int job_threads_ = 1;
  SpinBarrier barrier_;
  std::vector<std::thread> workers_;
};

}  // namespace fusedrnn
