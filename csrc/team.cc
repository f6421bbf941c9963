#include "team.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#if defined(__linux__)
#include <sys/prctl.h>
#include <unistd.h>
#endif

#include <chrono>
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

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Waiting policy (measured on 2-vCPU KVM guests: a pause ≈ 70 ns; waking a thread whose vCPU
// has halted took 60 µs after 5 ms idle and ~3 ms after 25 ms idle; a thread that naps in short
// sleeps answers within about one nap after any idle time: 100 µs naps cost ~20 % of a core
// (each timer wake-up exits to the hypervisor), 1 ms naps ~2 %).  A nap is a timed wait on the
// sleepers' condition variable, so a posted job or wake() (at the top of every op call) ends it
// at once: with nanosleep a worker in 1 ms naps joined a call half a nap late on average, most
// of a small call (lstm-H128-B16-T25 inference at 2 threads after the other peers' calls in the
// benchmark's process: 1.40 → 1.14 ms; docs/performance.md, session 22).
constexpr int64_t kPauseNs = 30'000;          // spin with pause first
constexpr int64_t kBarrierSpinNs = 2'000'000;  // then with sched_yield, then sleep
constexpr int64_t kJobSpinNs = 3'000'000;      // workers between jobs: spin, then
constexpr int64_t kShortNapNs = 100'000;       // nap (nanosleep) and look again,
constexpr int64_t kShortNapsNs = 10'000'000;   // up to 10 ms after the last job,
constexpr int64_t kLongNapNs = 1'000'000;      // then in longer naps
constexpr int64_t kNapWindowNs = 100'000'000;  // up to 0.1 s, then sleep
constexpr int kClockEvery = 64;                // pauses between clock reads (≈ 4 µs)
// A job waits for its workers for about a tenth of its estimated one-thread time (flops at
// ~50 GFLOP/s), within these bounds.
constexpr int64_t kJoinMinNs = 50'000, kJoinMaxNs = 3'000'000;
// A worker that naps or sleeps, or did so in the last kWarmNs, is cold: its just-woken vCPU ran a 2-thread
// job slower than the caller alone (H = 128, B = 16, T = 50 inference after 5 ms idle: 5.9 ms on
// the team, 4.5 ms alone; back to back, with spinning workers: 3.0 vs 4.4 ms).  A job of fewer
// than kSoloFlops (≈ 4 ms on one thread) that finds a cold worker runs alone, and the workers
// keep spinning meanwhile, so the next call finds them warm.
constexpr int64_t kWarmNs = 1'000'000;
constexpr int64_t kSoloFlops = 256'000'000;

// Spins until `done()` or `limit_ns` from `start`: pause first, then sched_yield.  True if done.
template <class Done>
bool spin_until(Done done, int64_t start, int64_t limit_ns) {
  for (;;) {
    for (int i = 0; i < kClockEvery; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    const int64_t waited = now_ns() - start;
    if (waited > limit_ns) return false;
    if (waited > kPauseNs) sched_yield();
  }
}

class Alone final : public Sync {
 public:
  void wait() override {}
};

constexpr uint64_t kCountMask = (uint64_t(1) << 31) - 1;

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
  const auto passed = [&] { return generation_.load(std::memory_order_acquire) != generation; };
  if (spin_until(passed, now_ns(), kBarrierSpinNs)) return;
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != generation; });
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

namespace {
std::atomic<Team*> current_team{nullptr};
std::atomic<int64_t> join_delay_ns{0};
}  // namespace

std::atomic<bool> unpacked_steps{true};

std::atomic<bool> worker_placement{true};

std::atomic<int64_t> l2_cache_override{-1};

std::atomic<int64_t> min_step_macs_per_thread{kMinStepMacsPerThread};

int64_t l2_cache_bytes() {
  const int64_t set = l2_cache_override.load(std::memory_order_relaxed);
  if (set >= 0) return set;
#ifdef _SC_LEVEL2_CACHE_SIZE
  static const int64_t bytes = [] {
    const long size = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return size > 0 ? int64_t(size) : int64_t(0);
  }();
  return bytes;
#else
  return 0;
#endif
}

void set_join_delay_ns(int64_t ns) { join_delay_ns.store(ns > 0 ? ns : 0, std::memory_order_relaxed); }

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
    const uint64_t seen = roster_.load(std::memory_order_relaxed) >> 32;  // busy_ is held
    workers_.emplace_back([this, seen] { worker_loop(seen); });
    handles_.push_back(workers_.back().native_handle());
    workers_.back().detach();
    placed_off_cpu_ = -1;  // the new worker has the caller's CPUs: place them all again
    napped_ns_.store(now_ns(), std::memory_order_relaxed);  // a new thread starts cold
  }
}

void Team::place_workers() {
#if defined(__linux__)
  const int cpu = worker_placement.load(std::memory_order_relaxed) ? sched_getcpu() : -1;
  if (cpu == placed_off_cpu_) return;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  if (cpu >= 0) CPU_CLR(cpu, &allowed);
  // A caller allowed on one CPU only leaves the workers where they are.
  if (CPU_COUNT(&allowed) > 0) {
    for (const pthread_t handle : handles_) pthread_setaffinity_np(handle, sizeof allowed, &allowed);
  }
  placed_off_cpu_ = cpu;
#endif
}

std::vector<std::vector<int>> Team::worker_cpus() {
  std::lock_guard<std::mutex> busy(busy_);
  std::vector<std::vector<int>> cpus;
#if defined(__linux__)
  for (const pthread_t handle : handles_) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    cpus.emplace_back();
    if (pthread_getaffinity_np(handle, sizeof allowed, &allowed) != 0) continue;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &allowed)) cpus.back().push_back(cpu);
  }
#endif
  return cpus;
}

void Team::notify_sleepers() {
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(sleep_mutex_); }
    news_.notify_all();
  }
}

void Team::wake() {
  wake_calls_.fetch_add(1, std::memory_order_seq_cst);
  notify_sleepers();
}

void Team::wait_for_job(uint64_t seen_generation) {
  uint64_t seen_wake = wake_calls_.load(std::memory_order_relaxed);
  const auto news = [&] {
    return (roster_.load(std::memory_order_seq_cst) >> 32) != seen_generation ||
           wake_calls_.load(std::memory_order_seq_cst) != seen_wake;
  };
  const auto posted = [&] { return (roster_.load(std::memory_order_acquire) >> 32) != seen_generation; };
  for (;;) {
    const int64_t start = now_ns();
    if (spin_until(posted, start, kJobSpinNs)) return;
    if (solo_.load(std::memory_order_relaxed)) continue;  // a caller runs a job alone: stay warm
    seen_wake = wake_calls_.load(std::memory_order_seq_cst);
    for (int64_t idle = 0; idle < kNapWindowNs; idle = now_ns() - start) {
      const std::chrono::nanoseconds nap(idle < kShortNapsNs ? kShortNapNs : kLongNapNs);
      resting_.fetch_add(1, std::memory_order_relaxed);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      {  // a nap that a job or wake() ends early (notify_sleepers)
        std::unique_lock<std::mutex> lock(sleep_mutex_);
        news_.wait_for(lock, nap, news);
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      napped_ns_.store(now_ns(), std::memory_order_relaxed);
      resting_.fetch_sub(1, std::memory_order_relaxed);
      if (posted()) return;
      if (wake_calls_.load(std::memory_order_relaxed) != seen_wake) break;  // a call is coming: spin
    }
    if (wake_calls_.load(std::memory_order_relaxed) != seen_wake) continue;
    resting_.fetch_add(1, std::memory_order_relaxed);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      news_.wait(lock, news);
    }
    napped_ns_.store(now_ns(), std::memory_order_relaxed);
    resting_.fetch_sub(1, std::memory_order_relaxed);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    if ((roster_.load(std::memory_order_acquire) >> 32) != seen_generation) return;
    // woken by wake(): spin again, for the job that is coming
  }
}

void Team::worker_loop(uint64_t seen) {
#if defined(__linux__)
  prctl(PR_SET_TIMERSLACK, 10'000UL);  // naps as asked, not 50 µs (the default slack) longer
#endif
  for (;;) {
    wait_for_job(seen);
    uint64_t roster = roster_.load(std::memory_order_acquire);
    const uint64_t generation = roster >> 32;
    seen = generation;
    if (const int64_t delay = join_delay_ns.load(std::memory_order_relaxed)) {
      const timespec pause{time_t(delay / 1'000'000'000), long(delay % 1'000'000'000)};
      nanosleep(&pause, nullptr);
      roster = roster_.load(std::memory_order_acquire);
    }
    // Join the job of `generation` while its roster is open and short of workers.
    int index = 0;
    while (!(roster & kClosed) && (roster >> 32) == generation &&
           int64_t(roster & kCountMask) < wanted_workers_.load(std::memory_order_relaxed)) {
      if (roster_.compare_exchange_weak(roster, roster + 1, std::memory_order_acq_rel)) {
        index = int(roster & kCountMask) + 1;
        break;
      }
    }
    if (index == 0) continue;  // late, or not needed: wait for the next job
    if (open_) {  // runs at once; the caller waits for every worker that joined to leave
      job_(context_, index, participants_, nullptr);
      left_.fetch_add(1, std::memory_order_acq_rel);
      continue;
    }
    // The caller closes the roster within its join window; yield meanwhile (more threads than
    // cores: the caller may need this one's core to get there).
    const auto closed = [&] { return ((roster = roster_.load(std::memory_order_acquire)) & kClosed) != 0; };
    while (!spin_until(closed, now_ns(), kBarrierSpinNs)) {
    }
    const int participants = int(roster & kCountMask) + 1;
    job_(context_, index, participants, &barrier_);
    barrier_.wait();  // the job's end
  }
}

void Team::run(int threads, JobFunction job, void* context, int64_t flops) {
  // One thread takes no lock: a thread of a running job may run a one-thread job (a batch
  // slice's loop, cells.h run_in_slices), and try_lock of the mutex it holds is undefined.
  std::unique_lock<std::mutex> busy(busy_, std::defer_lock);
  Alone alone;
  if (threads <= 1 || !busy.try_lock()) {
    job(context, 0, 1, &alone);
    return;
  }
  ensure_workers(threads - 1);
  place_workers();
  const bool cold = resting_.load(std::memory_order_relaxed) > 0 ||
                    now_ns() - napped_ns_.load(std::memory_order_relaxed) < kWarmNs;
  if (flops < kSoloFlops && cold) {
    short_teams.fetch_add(1, std::memory_order_relaxed);
    solo_.store(true, std::memory_order_relaxed);
    job(context, 0, 1, &alone);
    solo_.store(false, std::memory_order_relaxed);
    return;
  }
  job_ = job;
  context_ = context;
  open_ = false;
  wanted_workers_.store(threads - 1, std::memory_order_relaxed);
  const uint64_t generation = (roster_.load(std::memory_order_relaxed) >> 32) + 1;
  roster_.store(generation << 32, std::memory_order_seq_cst);
  notify_sleepers();
  int64_t window = flops / 500;  // ns: a tenth of the time at ~50 GFLOP/s
  window = window < kJoinMinNs ? kJoinMinNs : window > kJoinMaxNs ? kJoinMaxNs : window;
  uint64_t roster = roster_.load(std::memory_order_acquire);
  spin_until([&] {
    roster = roster_.load(std::memory_order_acquire);
    return int64_t(roster & kCountMask) >= threads - 1;
  }, now_ns(), window);
  // Close the roster: the workers that joined are the job's team.  The barrier is sized before
  // the close is published (no joined worker touches it before it sees the close).
  do barrier_.reset(int(roster & kCountMask) + 1);
  while (!roster_.compare_exchange_weak(roster, roster | kClosed, std::memory_order_acq_rel));
  const int participants = int(roster & kCountMask) + 1;
  (participants == threads ? full_teams : short_teams).fetch_add(1, std::memory_order_relaxed);
  job(context, 0, participants, participants > 1 ? static_cast<Sync*>(&barrier_) : &alone);
  if (participants > 1) barrier_.wait();  // the job's end: every participant is done with `context`
}

void Team::run_open(int threads, JobFunction job, void* context) {
  std::unique_lock<std::mutex> busy(busy_, std::defer_lock);  // one thread: no lock, as in run
  if (threads <= 1 || !busy.try_lock()) {
    job(context, 0, threads > 1 ? threads : 1, nullptr);
    return;
  }
  ensure_workers(threads - 1);
  place_workers();
  job_ = job;
  context_ = context;
  open_ = true;
  participants_ = threads;
  left_.store(0, std::memory_order_relaxed);
  wanted_workers_.store(threads - 1, std::memory_order_relaxed);
  const uint64_t generation = (roster_.load(std::memory_order_relaxed) >> 32) + 1;
  roster_.store(generation << 32, std::memory_order_seq_cst);
  notify_sleepers();
  job(context, 0, threads, nullptr);
  // Close the roster (no worker joins after this), then wait for those that joined to leave:
  // they are past their last claim, so this is short.
  uint64_t roster = roster_.load(std::memory_order_acquire);
  while (!roster_.compare_exchange_weak(roster, roster | kClosed, std::memory_order_acq_rel)) {
  }
  const int joined = int(roster & kCountMask);
  (joined == threads - 1 ? full_teams : short_teams).fetch_add(1, std::memory_order_relaxed);
  while (!spin_until([&] { return left_.load(std::memory_order_acquire) == joined; }, now_ns(),
                     kBarrierSpinNs)) {
  }
}

namespace {
constexpr uint64_t kPhaseItems = (uint64_t(1) << 32) - 1;

// Waits until `done()`: spins (pause, then sched_yield), then naps (the thread holding the last
// item may have lost its CPU).
template <class Done>
void wait_until(Done done) {
  if (spin_until(done, now_ns(), kBarrierSpinNs)) return;
  const timespec nap{0, 20'000};
  while (!done()) nanosleep(&nap, nullptr);
}
}  // namespace

PhaseQueue::PhaseQueue(int participants)
    : participants_(participants > 1 ? participants : 1), shares_(new Share[size_t(participants_)]) {}

PhaseQueue::~PhaseQueue() { delete[] shares_; }

void PhaseQueue::wait_open(int64_t phase) {
  const auto open = [&] { return int64_t(done_.load(std::memory_order_acquire) >> 32) >= phase; };
  if (!open()) wait_until(open);
}

bool PhaseQueue::claim(int participant, int64_t phase, int64_t items, int64_t* item) {
  if (int64_t(done_.load(std::memory_order_relaxed) >> 32) > phase) return false;  // all done
  const uint64_t tag = uint64_t(phase + 1) << 32;
  for (int i = 0; i < participants_; ++i) {
    const int share = (participant + i) % participants_;
    const int64_t first = items * share / participants_, last = items * (share + 1) / participants_;
    std::atomic<uint64_t>& next = shares_[share].next;
    uint64_t v = next.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t v_tag = v & ~kPhaseItems;
      if (v_tag > tag) break;  // the share was used up in this phase
      const int64_t index = v_tag == tag ? int64_t(v & kPhaseItems) : first;
      if (index >= last) break;
      if (next.compare_exchange_weak(v, tag | uint64_t(index + 1), std::memory_order_relaxed)) {
        *item = index;
        return true;
      }
    }
  }
  return false;
}

void PhaseQueue::finish(int64_t phase, int64_t items, int64_t count) {
  if (count == 0) return;
  const uint64_t before = done_.fetch_add(uint64_t(count), std::memory_order_acq_rel);
  if (int64_t(before & kPhaseItems) + count == items)  // the phase's last item: open the next
    done_.store(uint64_t(phase + 1) << 32, std::memory_order_release);
}

void run_team_open(int threads, JobFunction job, void* context) {
  Team::instance().run_open(threads, job, context);
}

void run_team(int threads, JobFunction job, void* context, int64_t flops) {
  Team::instance().run(threads, job, context, flops);
}

void wake_team() { Team::instance().wake(); }

std::vector<std::vector<int>> worker_cpus() { return Team::instance().worker_cpus(); }

std::atomic<int64_t> full_teams{0}, short_teams{0};
std::atomic<int64_t> sliced_loops{0};

}  // namespace fusedrnn
