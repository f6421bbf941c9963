// The engine's persistent thread team: open jobs (the time loops) and static jobs with a
// per-step barrier (the large GEMMs).
//
// One team per process.  An open job (run_open) starts on the caller (thread 0) at once; each
// worker that sees it while the caller is still inside joins and takes part of the work still to
// do through the job's PhaseQueue (engine.h), however late it comes: a worker whose (v)CPU is
// asleep — waking one takes 0.1–3 ms on the VMs we measured — or that runs slowly after its
// wake-up costs the job nothing but the items it took.
//
// A static job (run) runs on the caller plus the workers that check in within a short join
// window after it is posted; a worker still waking is not waited for (every kernel gives the same
// bits for any team size).  `wake()` lets a caller start the workers' wake-up early, before its
// own set-up work.  A small static job (estimated under ~4 ms on one thread) that finds a worker
// that napped in the last millisecond runs on the caller alone while the workers spin: a
// just-woken vCPU slowed a 2-thread job below one thread's speed.
//
// Waiting (between steps at the barrier, between jobs in the workers) spins with `pause` for a
// few tens of µs, then spins with sched_yield (another runnable thread on this CPU gets it), and
// only then sleeps on a condition variable (the workers between jobs first in naps, timed waits
// on it that a job or wake() ends early): a sleeping thread's vCPU halts, and its wake-up costs
// far more than the wait it saved.
//
// Before a job on more than one thread the caller keeps the workers off its own CPU (Linux: their
// affinity becomes the caller's allowed CPUs but the one it runs on; set again only when the
// caller is found on another CPU).  Left to the scheduler, a worker woken by the caller was at
// times queued on the caller's busy CPU for a whole call while the other stayed idle: both
// threads ran at half speed (lstm-H128-B64-T50 inference at 2 threads, in the benchmark's
// process with every peer loaded: 7.4 ms in most calls against 3.8-4.2 with the workers kept off).
//
// A mutex admits one job at a time; a caller that finds the team busy runs its job alone.  In a
// child process made by fork() the team's threads do not exist: the child gets a new, empty team
// (the old one, whose mutexes may have been held at the fork, is abandoned).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <pthread.h>
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
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<unsigned> generation_{0};
  std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
};

class Team {
 public:
  static Team& instance();
  void run(int threads, JobFunction job, void* context, int64_t flops);
  void run_open(int threads, JobFunction job, void* context);  // run_team_open
  void wake();  // sleeping workers start waking for a job that is about to come
  std::vector<std::vector<int>> worker_cpus();  // each worker's allowed CPUs

 private:
  Team() = default;
  static void replace_after_fork();  // pthread_atfork child handler: the workers did not fork
  void ensure_workers(int count);
  void worker_loop(uint64_t seen_generation);
  void wait_for_job(uint64_t seen_generation);  // returns when a job of a newer generation is posted
  void notify_sleepers();  // wakes workers asleep on news_ (after the seq_cst store they wait for)
  void place_workers();    // keeps the workers off the caller's CPU (busy_ is held)

  // The roster of the current job, one word: generation << 32 | closed << 31 | workers joined.
  // A worker joins only a roster of the generation it saw and only while it is open; the caller
  // closes it when every worker it asked for has joined or the join window has passed.
  static constexpr uint64_t kClosed = uint64_t(1) << 31;
  alignas(64) std::atomic<uint64_t> roster_{0};
  alignas(64) std::atomic<uint64_t> wake_calls_{0};
  std::atomic<int64_t> napped_ns_{0};  // when a worker last woke from a nap or sleep
  std::atomic<int> resting_{0};        // workers in a nap or asleep now
  std::atomic<bool> solo_{false};      // the caller runs a job alone (cold workers): they spin
  std::atomic<int> sleepers_{0};
  std::mutex busy_;        // held for the whole of a job
  std::mutex sleep_mutex_;
  std::condition_variable news_;
  JobFunction job_ = nullptr;  // written before the roster of its generation is published
  void* context_ = nullptr;
  bool open_ = false;          // an open job: a worker that joins runs it at once
  int participants_ = 1;       // of an open job: the most threads that may take part
  std::atomic<int> left_{0};   // workers that have finished their part of the open job
  std::atomic<int64_t> wanted_workers_{0};
  SpinBarrier barrier_;
  std::vector<std::thread> workers_;
  std::vector<pthread_t> handles_;  // the workers' (detached) threads
  int placed_off_cpu_ = -1;         // the CPU the workers are kept off (-1: none)
};

}  // namespace fusedrnn
