// ProcessGroup over MPI: a private communicator, a coordinator protocol at rank
// 0 that checks every call's header and names missing ranks, and nonblocking
// collectives polled until a deadline so that no wait is unbounded.
#include "pax/dist/process_group.h"

// MPI's C interface only: its deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pax/core/device_put.h"
#include "pax/core/env_switch.h"
#include "pax/core/stop.h"
#include "pax/interp/collective_thread.h"
#include "pax/ops/numpy.h"

namespace pax::dist {
namespace detail {

struct Communicator {
  MPI_Comm comm = MPI_COMM_NULL;  // MPI_COMM_NULL: a single process, MPI untouched
  int index = 0, count = 1;
  std::vector<int> world_ranks;    // the world rank of each index; empty for the world
  std::string label;               // in messages after the operation: "" or " over 'data'"
  int64_t finished_sequence = -1;  // the last collective whose data this rank has
  bool answering_stalled = true;   // answer other ranks' stalled-transfer messages

  // Rank r as messages name it: "3", or "1 (world rank 3)" in a sub-group.
  std::string rank(int64_t r) const {
    if (world_ranks.empty() || r < 0 || r >= int64_t(world_ranks.size())) return std::to_string(r);
    return std::to_string(r) + " (world rank " + std::to_string(world_ranks[size_t(r)]) + ")";
  }
};

}  // namespace detail

namespace {

using detail::Communicator;
using Clock = std::chrono::steady_clock;

// What every rank says about a call before any data moves.
enum class OpKind : int64_t { barrier = 1, all_reduce, all_gather, broadcast, reduce_scatter, split, permute };
constexpr int kMaxHeaderDims = 12;
// sequence, kind, dtype, param0, param1, ndim, dims..., the place among
// a compiled program's collectives (interp/collective_thread.h; -1: none)
constexpr int kHeaderInts = 7 + kMaxHeaderDims;
// Rank 0's answer (struct Verdict below) travels as kVerdictInts integers.
constexpr int kVerdictInts = 3 + 2 * kHeaderInts;
constexpr int kMaxListedRanks = kVerdictInts - 3;
constexpr int kTagHeader = 0x7a11;
constexpr int kTagVerdict = 0x7a12;
// After a transfer timed out: {sequence, state} between the ranks, to learn
// which one stopped (state: kStillWaiting or kFinished).
constexpr int kTagStalled = 0x7a13;
// A permute's block, from its source to its destination.
constexpr int kTagPermute = 0x7a14;
constexpr int64_t kStillWaiting = 0;
constexpr int64_t kFinished = 1;

// Every group's communicator, for answering stalled-transfer questions.
std::vector<Communicator*> g_comms;
bool g_owns_mpi = false;  // this library called MPI_Init_thread
bool g_broken = false;    // some group timed out (bounds MPI_Finalize at exit)
double g_exit_timeout = 300;
std::vector<MPI_Request> g_abandoned;  // requests left pending by a timeout
// Buffers those requests may still read or write.
std::vector<std::shared_ptr<Buffer>> g_keep_alive;
double g_stall_seconds = 0;  // stall_next_transfer_for_testing
double g_stop_grace = 30;    // ProcessGroup::stop_grace_seconds()
// When a wait first saw the stop request (pax::stop_requested()); every wait
// ends at the latest g_stop_grace after it.
std::optional<std::chrono::steady_clock::time_point> g_stop_seen;

const char* kind_name(int64_t kind) {
  switch (OpKind(kind)) {
    case OpKind::barrier: return "barrier";
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::all_gather: return "all_gather";
    case OpKind::broadcast: return "broadcast";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::split: return "split";
    case OpKind::permute: return "permute";
  }
  return "unknown operation";
}

std::string seconds_str(double s) {
  std::ostringstream out;
  out << s << " s";
  return out.str();
}

// How a wait ended without its data: "timed out after 300 s", or, when a
// stop request cut it short, how long after the request it gave up.
std::string wait_ended(double timeout, bool cut_by_stop, const std::string& who = "this process") {
  if (!cut_by_stop) return "timed out after " + seconds_str(timeout);
  return "gave up waiting " + seconds_str(g_stop_grace) + " after " + who +
         " was asked to stop (SIGINT / SIGTERM / request_stop(); --dist_stop_grace)";
}

// Rank 0's answer to every rank's header: they agree, one rank's header
// differs from rank 0's (both are sent back), or ranks never arrived (which,
// and whether a stop request cut rank 0's wait short). encode / decode are
// the one place its wire layout lives: status, the differing rank or the
// number missing, cut_by_stop, then the two headers or the missing ranks.
struct Verdict {
  enum Status : int64_t { agreed = 0, mismatch = 1, timed_out = 2 };
  Status status = agreed;
  int64_t differing_rank = 0;                            // mismatch
  std::array<int64_t, kHeaderInts> root{}, differing{};  // mismatch: rank 0's and its headers
  int64_t missing_count = 0;                             // timed_out
  std::vector<int64_t> missing;                          // timed_out: the first kMaxListedRanks
  bool cut_by_stop = false;                              // timed_out

  std::vector<int64_t> encode() const {
    std::vector<int64_t> w(kVerdictInts, 0);
    w[0] = status;
    w[1] = status == mismatch ? differing_rank : missing_count;
    w[2] = cut_by_stop;
    if (status == mismatch) {
      std::copy(root.begin(), root.end(), w.begin() + 3);
      std::copy(differing.begin(), differing.end(), w.begin() + 3 + kHeaderInts);
    }
    for (size_t i = 0; status == timed_out && i < missing.size() && i < size_t(kMaxListedRanks); ++i)
      w[3 + i] = missing[i];
    return w;
  }
  static Verdict decode(const std::vector<int64_t>& w) {
    Verdict v;
    v.status = Status(w[0]);
    if (v.status == mismatch) {
      v.differing_rank = w[1];
      std::copy_n(w.begin() + 3, kHeaderInts, v.root.begin());
      std::copy_n(w.begin() + 3 + kHeaderInts, kHeaderInts, v.differing.begin());
    } else if (v.status == timed_out) {
      v.missing_count = w[1];
      v.cut_by_stop = w[2] != 0;
      v.missing.assign(w.begin() + 3, w.begin() + 3 + std::min<int64_t>(w[1], kMaxListedRanks));
    }
    return v;
  }
};

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  PAX_FAIL("pax::dist: ", what, " failed: ", std::string(text, size_t(len)));
}

// Answers a rank whose transfer timed out and that asks whether this one
// stopped: this rank has finished that collective and gone on. Every group's
// communicator is asked, since this rank may be waiting in another group.
void answer_stalled_ranks() {
  for (Communicator* c : g_comms) {
    while (c->answering_stalled && c->comm != MPI_COMM_NULL) {
      int pending = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kTagStalled, c->comm, &pending, &status) != MPI_SUCCESS || !pending) break;
      std::array<int64_t, 2> asked{};
      if (MPI_Recv(asked.data(), 2, MPI_INT64_T, status.MPI_SOURCE, kTagStalled, c->comm, MPI_STATUS_IGNORE) !=
          MPI_SUCCESS)
        break;
      // A failure path only: the answer's buffer is never freed.
      auto* answer = new std::array<int64_t, 2>{asked[0], asked[0] <= c->finished_sequence ? kFinished : kStillWaiting};
      MPI_Request req;
      if (MPI_Isend(answer->data(), 2, MPI_INT64_T, status.MPI_SOURCE, kTagStalled, c->comm, &req) == MPI_SUCCESS)
        MPI_Request_free(&req);
    }
  }
}

// Polls `requests` until all complete or `deadline`; returns which completed.
// MPI progresses a nonblocking collective only inside MPI calls, so a data
// transfer (`busy`: every process has arrived) is polled without pauses;
// waits for other processes to arrive sleep between polls instead of
// burning a core.
//
// A stop request (SIGTERM, pax::request_stop()) shortens every wait: it ends
// at the latest stop_grace_seconds() after the first wait that saw the request,
// so that a process asked to stop never waits out an hour-long phase timeout
// for a peer that will not come.
struct Polled {
  std::vector<bool> done;    // per request
  bool cut_by_stop = false;  // a stop request ended the wait before its deadline
};
Polled poll_until(std::span<MPI_Request> requests, Clock::time_point deadline, bool busy = false) {
  std::vector<bool> done(requests.size(), false);
  size_t remaining = requests.size();
  bool cut_by_stop = false;
  for (int spins = 0; remaining > 0; ++spins) {
    if (stop_requested()) {
      if (!g_stop_seen) g_stop_seen = Clock::now();
      const Clock::time_point stop_deadline =
          *g_stop_seen + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(g_stop_grace));
      if (stop_deadline < deadline) {
        deadline = stop_deadline;
        cut_by_stop = true;
      }
    } else {
      g_stop_seen.reset();  // cleared (clear_stop_request): a later request starts a new grace
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      int flag = 0;
      check_mpi(MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE), "MPI_Test");
      if (flag) {
        done[i] = true;
        --remaining;
      }
    }
    if (remaining == 0) {
      cut_by_stop = false;
      break;
    }
    if (Clock::now() >= deadline) break;
    // Spin briefly (small collectives finish in microseconds), then sleep so
    // that a long wait does not burn a core.
    if (!busy && spins > 2000) {
      answer_stalled_ranks();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    } else if (spins > 16 && on_collective_thread()) {
      // The communication thread shares the cores with computing threads:
      // while data moves it gives way after each poll, and once a transfer
      // takes long (a peer busy computing) or while others arrive, it polls
      // every few microseconds.
      if (busy && spins < 2000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(5));
      }
    }
  }
  return {std::move(done), cut_by_stop};
}

// Leaves unfinished requests behind after a timeout: their buffers must
// outlive this call, so receives go into heap blocks never freed. Point-to-point
// requests are cancelled at exit; a nonblocking collective cannot be
// cancelled (MPI makes that erroneous), so it is only left (`collective`).
void abandon(std::span<MPI_Request> requests, const std::vector<bool>& done, bool collective = false) {
  for (size_t i = 0; i < requests.size(); ++i)
    if (!done[i] && !collective) g_abandoned.push_back(requests[i]);
  g_broken = true;
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || !g_owns_mpi) return;
  // Collectives still on the communication thread (a program that failed
  // left them) end first: each is bounded by the group's timeout.
  finish_started_collectives();
  if (g_broken) {
    for (MPI_Request& r : g_abandoned) MPI_Cancel(&r);
    // MPI_Finalize synchronises with every rank; a rank that hangs must not
    // hang this one too.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::duration<double>(g_exit_timeout));
      std::_Exit(1);
    }).detach();
  }
  MPI_Finalize();
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::u32: return MPI_UINT32_T;
    default: PAX_FAIL("pax::dist: no MPI reduction type for ", d);
  }
}

int checked_count(int64_t n, const char* op, const AVal& aval) {
  PAX_CHECK(n <= INT_MAX, "pax::dist ", op, ": ", aval.str(), " is too large (", n, " elements or bytes; at most ",
            INT_MAX, " per call)");
  return int(n);
}

Array empty_like(const AVal& aval) {
  return Array(aval, Buffer::allocate(size_t(aval.shape.numel()) * itemsize(aval.dtype)));
}

}  // namespace

struct ProcessGroup::Header {
  std::array<int64_t, kHeaderInts> v{};
  Header(OpKind kind, int64_t sequence, const AVal* aval, int64_t p0, int64_t p1) {
    v[kHeaderInts - 1] = current_collective_position();
    v[0] = sequence;
    v[1] = int64_t(kind);
    v[3] = p0;
    v[4] = p1;
    if (aval) {
      v[2] = int64_t(aval->dtype);
      v[5] = aval->shape.rank();
      for (int64_t i = 0; i < aval->shape.rank(); ++i) {
        // Dims beyond the header's room are folded into its last slot.
        int64_t slot = std::min<int64_t>(i, kMaxHeaderDims - 1);
        v[size_t(6 + slot)] = i < kMaxHeaderDims - 1 ? aval->shape[i] : v[size_t(6 + slot)] * 1000003 + aval->shape[i];
      }
    } else {
      v[2] = -1;
    }
  }
  Header() = default;
  std::string str() const {
    std::ostringstream out;
    out << kind_name(v[1]) << " #" << v[0];
    if (v[1] == int64_t(OpKind::all_reduce) || v[1] == int64_t(OpKind::reduce_scatter))
      out << " (" << reduce_op_name(ReduceOp(v[3])) << ")";
    if (v[1] == int64_t(OpKind::broadcast)) out << " (root " << v[3] << ")";
    if (v[1] == int64_t(OpKind::all_gather)) out << " (axis " << v[3] << (v[4] ? ", tiled" : "") << ")";
    if (v[1] == int64_t(OpKind::reduce_scatter)) out << " (axis " << v[4] << ")";
    if (v[2] >= 0) {
      out << " of " << dtype_short_name(DType(v[2])) << "[";
      if (v[5] > kMaxHeaderDims) {
        out << "rank " << v[5];
      } else {
        for (int64_t i = 0; i < v[5]; ++i) out << (i ? "," : "") << v[size_t(6 + i)];
      }
      out << "]";
    }
    if (v[kHeaderInts - 1] >= 0) out << " as collective " << v[kHeaderInts - 1] << " of a compiled program";
    return out.str();
  }
};

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "unknown";
}

ProcessGroup& process_group() {
  static ProcessGroup group;
  group.initialize();
  return group;
}

ProcessGroup::ProcessGroup() : comm_(std::make_unique<Communicator>()) { g_comms.push_back(comm_.get()); }

ProcessGroup::~ProcessGroup() {
  std::erase(g_comms, comm_.get());
  int finalized = 1;
  if (mpi_) MPI_Finalized(&finalized);
  // A broken group may have collectives pending on its communicator: leave it.
  if (!finalized && !broken_by_ && is_subgroup() && comm_->comm != MPI_COMM_NULL) MPI_Comm_free(&comm_->comm);
}

namespace {

// A positive number of seconds from environment variable `name`, or `fallback`.
double seconds_from_env(const char* name, double fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr) return fallback;
  char* end = nullptr;
  const double s = std::strtod(env, &end);
  PAX_CHECK(end != env && *end == '\0' && s > 0, "pax::dist: $", name, "=\"", env,
            "\" is not a positive number of seconds");
  return s;
}

}  // namespace

void ProcessGroup::initialize() {
  if (initialized_) return;
  timeout_seconds_ = seconds_from_env("PAX_DIST_TIMEOUT", timeout_seconds_);
  phase_timeout_seconds_ = seconds_from_env("PAX_DIST_PHASE_TIMEOUT", phase_timeout_seconds_);
  g_stop_grace = seconds_from_env("PAX_DIST_STOP_GRACE", g_stop_grace);
  g_exit_timeout = timeout_seconds_;
  mpi_ = launched_by_mpirun();
  if (mpi_) {
    int already = 0;
    MPI_Initialized(&already);
    if (!already) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      g_owns_mpi = true;
      std::atexit(finalize_at_exit);
    }
    // Collectives run on the communication thread only where MPI allows
    // calls from any one thread at a time (an application may have
    // initialised MPI for its main thread alone).
    int level = 0;
    check_mpi(MPI_Query_thread(&level), "MPI_Query_thread");
    if (level < MPI_THREAD_SERIALIZED) disable_overlap_collectives();
    // A private communicator: the application's own MPI traffic never matches ours.
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_->comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_->comm, &comm_->index);
    MPI_Comm_size(comm_->comm, &comm_->count);
  }
  initialized_ = true;
}

std::unique_ptr<ProcessGroup> ProcessGroup::split(int color, int key, const std::string& axis_name) {
  finish_started_collectives();  // they come first, in every process
  initialize();
  PAX_CHECK(color >= 0, "ProcessGroup::split: color ", color,
            " is negative (processes passing one color >= 0 form a group)");
  PAX_CHECK(!axis_name.empty(), "ProcessGroup::split: the sub-group's axis needs a non-empty name");
  check_usable("split");
  agree(Header(OpKind::split, sequence_++, nullptr, 0, 0), timeout_seconds());
  std::unique_ptr<ProcessGroup> group(new ProcessGroup());
  group->world_ = world_ ? world_ : this;
  group->mpi_ = mpi_;
  group->initialized_ = true;
  group->axis_name_ = axis_name;
  Communicator& c = *group->comm_;
  c.label = " over '" + axis_name + "'";
  if (comm_->comm == MPI_COMM_NULL) {
    c.world_ranks = {0};
    return group;
  }
  // Every process has arrived (agree), so this blocking call returns promptly.
  check_mpi(MPI_Comm_split(comm_->comm, color, key, &c.comm), "MPI_Comm_split");
  MPI_Comm_set_errhandler(c.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c.comm, &c.index);
  MPI_Comm_size(c.comm, &c.count);
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(c.comm, &mine);
  MPI_Comm_group(group->world_->comm_->comm, &world);
  std::vector<int> ranks(size_t(c.count));
  for (int i = 0; i < c.count; ++i) ranks[size_t(i)] = i;
  c.world_ranks.resize(size_t(c.count));
  check_mpi(MPI_Group_translate_ranks(mine, c.count, ranks.data(), world, c.world_ranks.data()),
            "MPI_Group_translate_ranks");
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  return group;
}

int ProcessGroup::world_rank(int index) const {
  PAX_CHECK(index >= 0 && index < comm_->count, "ProcessGroup::world_rank: ", index,
            " is not an index of the group (0..", comm_->count - 1, ")");
  return comm_->world_ranks.empty() ? index : comm_->world_ranks[size_t(index)];
}

bool ProcessGroup::uses_mpi() const { return mpi_; }

void stall_next_transfer_for_testing(double seconds) { g_stall_seconds = seconds; }

int ProcessGroup::process_index() {
  initialize();
  return comm_->index;
}

int ProcessGroup::process_count() {
  initialize();
  return comm_->count;
}

void ProcessGroup::set_timeout_seconds(double seconds) {
  if (world_) return process_group().set_timeout_seconds(seconds);
  PAX_CHECK(seconds > 0, "ProcessGroup::set_timeout_seconds: ", seconds, " is not a positive number of seconds");
  timeout_seconds_ = seconds;
  g_exit_timeout = seconds;
}

void ProcessGroup::set_phase_timeout_seconds(double seconds) {
  if (world_) return process_group().set_phase_timeout_seconds(seconds);
  PAX_CHECK(seconds > 0, "ProcessGroup::set_phase_timeout_seconds: ", seconds, " is not a positive number of seconds");
  phase_timeout_seconds_ = seconds;
}

double ProcessGroup::stop_grace_seconds() const { return g_stop_grace; }

void ProcessGroup::set_stop_grace_seconds(double seconds) {
  PAX_CHECK(seconds > 0, "ProcessGroup::set_stop_grace_seconds: ", seconds, " is not a positive number of seconds");
  g_stop_grace = seconds;
}

void ProcessGroup::abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_ && process_group().process_count() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void ProcessGroup::set_axis_name(std::string name) {
  PAX_CHECK(!name.empty(), "ProcessGroup::set_axis_name: the process axis needs a non-empty name");
  axis_name_ = std::move(name);
}

void ProcessGroup::check_usable(const char* op) const {
  PAX_CHECK(!broken_by_, "pax::dist ", op, comm_->label, ": the process group is unusable: an earlier ", broken_by_,
            " timed out, so the processes no longer agree on which operation comes next");
}

void ProcessGroup::agree(const Header& mine, double timeout) {
  const char* op = kind_name(mine.v[1]);
  const Communicator& c = *comm_;
  const int index = c.index, count = c.count;
  if (count == 1) return;
  Verdict verdict;
  if (index == 0) {
    // Heap blocks: after a timeout, abandoned requests may still write or read
    // them, so they are then deliberately leaked.
    auto* theirs = new std::vector<Header>(size_t(count));
    std::vector<MPI_Request> recvs(size_t(count - 1));
    for (int r = 1; r < count; ++r)
      check_mpi(MPI_Irecv((*theirs)[size_t(r)].v.data(), kHeaderInts, MPI_INT64_T, r, kTagHeader, c.comm,
                          &recvs[size_t(r - 1)]),
                "MPI_Irecv");
    const Polled arrivals = poll_until(recvs, deadline_after(timeout));
    std::vector<int> missing, arrived;
    for (int r = 1; r < count; ++r) (arrivals.done[size_t(r - 1)] ? arrived : missing).push_back(r);
    if (!missing.empty()) {
      verdict.status = Verdict::timed_out;
      verdict.missing_count = int64_t(missing.size());
      verdict.missing.assign(missing.begin(), missing.end());
      verdict.cut_by_stop = arrivals.cut_by_stop;
      abandon(recvs, arrivals.done);
    } else {
      int bad = -1;
      for (int r = 1; r < count && bad < 0; ++r)
        if ((*theirs)[size_t(r)].v != mine.v) bad = r;
      if (bad > 0) {
        verdict.status = Verdict::mismatch;
        verdict.differing_rank = bad;
        verdict.root = mine.v;
        verdict.differing = (*theirs)[size_t(bad)].v;
      }
      delete theirs;
    }
    auto* answer = new std::vector<int64_t>(verdict.encode());
    std::vector<MPI_Request> sends(arrived.size());
    for (size_t i = 0; i < arrived.size(); ++i)
      check_mpi(MPI_Isend(answer->data(), kVerdictInts, MPI_INT64_T, arrived[i], kTagVerdict, c.comm, &sends[i]),
                "MPI_Isend");
    const Polled sent = poll_until(sends, deadline_after(timeout));
    if (std::all_of(sent.done.begin(), sent.done.end(), [](bool b) { return b; })) {
      delete answer;
    } else {
      abandon(sends, sent.done);
      broken_by_ = op;
      std::ostringstream silent;
      for (size_t i = 0; i < arrived.size(); ++i)
        if (!sent.done[i]) silent << (silent.tellp() > 0 ? ", " : "") << c.rank(arrived[i]);
      if (missing.empty())
        PAX_FAIL("pax::dist ", op, c.label, ": ", wait_ended(timeout, sent.cut_by_stop), ": rank(s) ", silent.str(),
                 " of ", count, " arrived but stopped responding before taking rank 0's answer (on rank 0)");
    }
  } else {
    std::array<MPI_Request, 2> reqs;
    // The header lives in the Header passed in; copy it so that an abandoned
    // send never reads a dead stack frame.
    auto* header = new Header(mine);
    auto* answer = new std::vector<int64_t>(kVerdictInts, 0);
    check_mpi(MPI_Isend(header->v.data(), kHeaderInts, MPI_INT64_T, 0, kTagHeader, c.comm, &reqs[0]), "MPI_Isend");
    check_mpi(MPI_Irecv(answer->data(), kVerdictInts, MPI_INT64_T, 0, kTagVerdict, c.comm, &reqs[1]), "MPI_Irecv");
    // Rank 0 answers at the latest `timeout` after it arrived; allow for
    // arriving before it.
    double margin = std::max(1.0, 0.1 * timeout);
    const Polled polled = poll_until(reqs, deadline_after(timeout + margin));
    if (!polled.done[1]) {
      abandon(reqs, polled.done);
      broken_by_ = op;
      PAX_FAIL("pax::dist ", op, c.label, ": ", wait_ended(timeout + margin, polled.cut_by_stop), " on rank ",
               c.rank(index), ": rank ", c.rank(0), " (which collects every rank's arrival) never answered");
    }
    if (!polled.done[0]) poll_until(std::span(reqs).first(1), deadline_after(timeout));  // completes at once now
    verdict = Verdict::decode(*answer);
    delete answer;
    delete header;
  }
  if (verdict.status == Verdict::timed_out) {
    std::ostringstream ranks;
    for (size_t i = 0; i < verdict.missing.size(); ++i) ranks << (i ? ", " : "") << c.rank(verdict.missing[i]);
    if (verdict.missing_count > kMaxListedRanks) ranks << ", ...";
    g_broken = true;
    broken_by_ = op;
    PAX_FAIL("pax::dist ", op, c.label, ": ",
             wait_ended(timeout, verdict.cut_by_stop, index == 0 ? "this process" : "rank " + c.rank(0)), ": ",
             verdict.missing_count == 1 ? "rank " : "ranks ", ranks.str(), " of ", count, " never arrived (on rank ",
             c.rank(index), ")");
  }
  if (verdict.status == Verdict::mismatch) {
    Header root, other;
    root.v = verdict.root;
    other.v = verdict.differing;
    PAX_FAIL("pax::dist ", op, c.label, ": the processes disagree: rank ", c.rank(0), " calls ", root.str(),
             " but rank ", c.rank(verdict.differing_rank), " calls ", other.str(),
             " (every process must make the same calls with arrays of one shape and dtype)");
  }
}

void ProcessGroup::barrier(double timeout) {
  finish_started_collectives();  // they come first, in every process
  initialize();
  check_usable("barrier");
  Header h(OpKind::barrier, sequence_++, nullptr, 0, 0);
  agree(h, timeout > 0 ? timeout : timeout_seconds());
}

void ProcessGroup::meet_after(const std::string& phase) {
  try {
    barrier(phase_timeout_seconds());
  } catch (const Error& e) {
    throw Error("after " + phase + " (which may take up to the phase timeout, " + seconds_str(phase_timeout_seconds()) +
                "): " + e.what());
  }
}

namespace {

const Array& check_input(const Array& x, const char* op) {
  PAX_CHECK(x.defined(), "pax::dist ", op, ": got an empty Array handle");
  PAX_CHECK(x.is_concrete(), "pax::dist ", op, ": needs a concrete array, got a traced ", x.aval().str(),
            " (host collectives run outside jit)");
  return x;
}

std::string rank_list(const Communicator& c, const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i)
    out << (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") << c.rank(ranks[i]);
  return out.str();
}

// After collective `sequence` timed out moving data on this rank, asks every
// other rank whether it is waiting too or has finished; the ranks that do not
// answer within a grace period are the ones whose data never arrived.
std::string which_ranks_stopped(Communicator& c, int64_t sequence, double timeout) {
  c.answering_stalled = false;
  const int index = c.index, count = c.count;
  auto* mine = new std::array<int64_t, 2>{sequence, kStillWaiting};  // read by sends that may never complete
  auto* theirs = new std::vector<std::array<int64_t, 2>>(size_t(count));
  std::vector<MPI_Request> sends, recvs;
  std::vector<int> peers;
  for (int r = 0; r < count; ++r) {
    if (r == index) continue;
    peers.push_back(r);
    sends.emplace_back();
    recvs.emplace_back();
    check_mpi(MPI_Isend(mine->data(), 2, MPI_INT64_T, r, kTagStalled, c.comm, &sends.back()), "MPI_Isend");
    check_mpi(MPI_Irecv((*theirs)[size_t(r)].data(), 2, MPI_INT64_T, r, kTagStalled, c.comm, &recvs.back()),
              "MPI_Irecv");
  }
  // The other waiting ranks time out within moments of this one.
  double grace = std::clamp(0.1 * timeout, 2.0, 30.0);
  const std::vector<bool> answered = poll_until(recvs, deadline_after(grace)).done;
  std::vector<int> stopped, waiting, finished;
  for (size_t i = 0; i < peers.size(); ++i) {
    const auto& a = (*theirs)[size_t(peers[i])];
    if (!answered[i] || a[0] != sequence) {
      stopped.push_back(peers[i]);
    } else {
      (a[1] == kFinished ? finished : waiting).push_back(peers[i]);
    }
  }
  abandon(recvs, answered);
  abandon(sends, std::vector<bool>(sends.size(), false));
  std::ostringstream out;
  if (stopped.empty()) {
    out << "every other process answered (MPI did not complete the transfer)";
  } else {
    out << rank_list(c, stopped) << (stopped.size() == 1 ? "'s" : "'") << " data never arrived ("
        << (stopped.size() == 1 ? "it" : "they") << " stopped during the transfer and did not answer within "
        << seconds_str(grace) << ")";
  }
  if (!waiting.empty())
    out << "; " << rank_list(c, waiting) << (waiting.size() == 1 ? " was" : " were") << " waiting too";
  if (!finished.empty()) out << "; " << rank_list(c, finished) << " had finished it";
  return out.str();
}

// Waits for one data-moving request. Every rank had arrived, so a timeout here
// means a process stopped in the middle of the transfer: the message names it.
// The data this process received, per kind of operation, for PAX_PROFILE:
// an all_gather's blocks of the other processes, a permute's block, an
// all_reduce's result, a reduce_scatter's block, a broadcast's array.
struct Traffic {
  std::array<std::atomic<int64_t>, 8> operations{}, bytes{};
};
Traffic& traffic() {
  static Traffic* t = [] {
    auto* made = new Traffic;
    if (env_switch("PAX_PROFILE", false)) {
      std::atexit([] {
        const Traffic& t = traffic();
        std::string line;
        int64_t total = 0;
        for (int64_t k = 1; k < int64_t(t.operations.size()); ++k) {
          if (t.operations[size_t(k)] == 0) continue;
          total += t.bytes[size_t(k)];
          line += std::string(line.empty() ? "" : ", ") + kind_name(k) + " " +
                  std::to_string(t.operations[size_t(k)].load()) + " ops " + std::to_string(t.bytes[size_t(k)].load()) +
                  " B";
        }
        if (!line.empty())
          std::fprintf(stderr, "PAX_PROFILE: pax::dist received %lld bytes (%s)\n", (long long)total, line.c_str());
      });
    }
    return made;
  }();
  return *t;
}
void count_received(OpKind kind, int64_t bytes) {
  traffic().operations[size_t(kind)] += 1;
  traffic().bytes[size_t(kind)] += bytes;
}

void wait_data(std::span<MPI_Request> reqs, std::initializer_list<const Array*> buffers, double timeout, const char* op,
               const char*& broken_by, Communicator& c, int64_t sequence) {
  const Polled polled = poll_until(reqs, deadline_after(timeout), /*busy=*/true);
  if (std::all_of(polled.done.begin(), polled.done.end(), [](bool d) { return d; })) {
    c.finished_sequence = sequence;
    return;
  }
  abandon(reqs, polled.done, /*collective=*/true);
  for (const Array* a : buffers) g_keep_alive.push_back(a->buffer());
  broken_by = op;
  std::string who = which_ranks_stopped(c, sequence, timeout);
  PAX_FAIL("pax::dist ", op, c.label, " #", sequence, ": ", wait_ended(timeout, polled.cut_by_stop), " on rank ",
           c.rank(c.index), " moving data: ", who);
}

// Fault injection (stall_next_transfer_for_testing): the collective has been
// agreed on; this rank moves no data, as if it had stopped.
void stall_if_asked(const char* op, const Communicator& c, int64_t sequence, const char*& broken_by) {
  if (g_stall_seconds <= 0) return;
  double seconds = std::exchange(g_stall_seconds, 0.0);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  g_broken = true;
  broken_by = op;
  PAX_FAIL("pax::dist ", op, c.label, " #", sequence, ": stalled for ", seconds_str(seconds),
           " on purpose (a test's fault)");
}

// The dtype a reduction runs in: bf16 and f16 go through f32.
// What a reduction sends: 16-bit floats as f32, bool (max / min only) as u8.
DType wire_dtype(DType d) {
  return d == DType::bf16 || d == DType::f16 ? DType::f32 : d == DType::bool_ ? DType::u8 : d;
}

void check_reducible(const AVal& aval, ReduceOp op, const char* name) {
  PAX_CHECK(aval.dtype != DType::bool_ || op == ReduceOp::max || op == ReduceOp::min, "pax::dist ", name,
            ": cannot reduce bool arrays (", aval.str(), ") with ", reduce_op_name(op),
            "; max and min work, or cast to an integer or floating dtype");
  PAX_CHECK(op != ReduceOp::mean || is_floating(aval.dtype), "pax::dist ", name, "(mean): needs a floating dtype, got ",
            aval.str());
  PAX_CHECK(op == ReduceOp::sum || op == ReduceOp::mean || op == ReduceOp::max || op == ReduceOp::min, "pax::dist ",
            name, ": unknown reduce op ", int(op));
}

// mean sums, then divides.
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM; }

}  // namespace

Array ProcessGroup::all_reduce(const Array& x, ReduceOp op) {
  // MPI reads and writes host memory: an array on a device is staged.
  if (x.is_concrete() && x.device().kind != DeviceKind::cpu) {
    const Array out = all_reduce(device_get(x), op);
    return x.committed() ? device_put(out, x.device()) : move_uncommitted(out, x.device());
  }
  finish_started_collectives();  // they come first, in every process
  initialize();
  const int count = comm_->count;
  check_input(x, "all_reduce");
  check_usable("all_reduce");
  agree(Header(OpKind::all_reduce, sequence_++, &x.aval(), int64_t(op), 0), timeout_seconds());
  check_reducible(x.aval(), op, "all_reduce");
  if (count == 1) return x;
  Array in = x.dtype() == wire_dtype(x.dtype()) ? x : x.astype(wire_dtype(x.dtype()));
  Array out = empty_like(in.aval());
  count_received(OpKind::all_reduce, int64_t(out.nbytes()));
  stall_if_asked("all_reduce", *comm_, sequence_ - 1, broken_by_);
  MPI_Request req;
  check_mpi(MPI_Iallreduce(in.data(), out.buffer()->data(), checked_count(in.size(), "all_reduce", x.aval()),
                           mpi_type(in.dtype()), mpi_op(op), comm_->comm, &req),
            "MPI_Iallreduce");
  wait_data(std::span(&req, 1), {&in, &out}, timeout_seconds(), "all_reduce", broken_by_, *comm_, sequence_ - 1);
  if (op == ReduceOp::mean) out = out / double(count);
  return out.dtype() == x.dtype() ? out : out.astype(x.dtype());
}

Array ProcessGroup::all_gather(const Array& x, int64_t axis, bool tiled) {
  // MPI reads and writes host memory: an array on a device is staged.
  if (x.is_concrete() && x.device().kind != DeviceKind::cpu) {
    const Array out = all_gather(device_get(x), axis, tiled);
    return x.committed() ? device_put(out, x.device()) : move_uncommitted(out, x.device());
  }
  finish_started_collectives();  // they come first, in every process
  initialize();
  const int count = comm_->count;
  check_input(x, "all_gather");
  check_usable("all_gather");
  agree(Header(OpKind::all_gather, sequence_++, &x.aval(), axis, tiled), timeout_seconds());
  // Stacking inserts an axis (0..ndim); tiling concatenates along one (0..ndim-1).
  PAX_CHECK(!tiled || x.ndim() > 0, "pax::dist all_gather(tiled): needs an array of rank >= 1, got ", x.aval().str());
  int64_t a = normalize_axis(axis, tiled ? x.ndim() : x.ndim() + 1, "pax::dist all_gather");
  Array stacked;  // [count, *x.shape]
  if (count == 1) {
    stacked = expand_dims(x, {0});
  } else {
    Shape shape = x.shape();
    shape.dims().insert(shape.dims().begin(), count);
    stacked = empty_like(AVal{shape, x.dtype(), x.weak_type()});
    int bytes = checked_count(int64_t(x.nbytes()) * count, "all_gather", x.aval()) / count;
    count_received(OpKind::all_gather, int64_t(bytes) * (count - 1));
    stall_if_asked("all_gather", *comm_, sequence_ - 1, broken_by_);
    MPI_Request req;
    check_mpi(MPI_Iallgather(x.data(), bytes, MPI_BYTE, stacked.buffer()->data(), bytes, MPI_BYTE, comm_->comm, &req),
              "MPI_Iallgather");
    wait_data(std::span(&req, 1), {&x, &stacked}, timeout_seconds(), "all_gather", broken_by_, *comm_, sequence_ - 1);
  }
  Array moved = a == 0 ? stacked : moveaxis(stacked, 0, a);
  if (!tiled) return moved;
  std::vector<int64_t> dims = x.shape().dims();
  dims[size_t(a)] *= count;
  return reshape(moved, dims);
}

Array ProcessGroup::broadcast(const Array& x, int root) {
  // MPI reads and writes host memory: an array on a device is staged.
  if (x.is_concrete() && x.device().kind != DeviceKind::cpu) {
    const Array out = broadcast(device_get(x), root);
    return x.committed() ? device_put(out, x.device()) : move_uncommitted(out, x.device());
  }
  finish_started_collectives();  // they come first, in every process
  initialize();
  const int count = comm_->count;
  check_input(x, "broadcast");
  check_usable("broadcast");
  agree(Header(OpKind::broadcast, sequence_++, &x.aval(), root, 0), timeout_seconds());
  PAX_CHECK(root >= 0 && root < count, "pax::dist broadcast: root ", root, " is not a process index (0..", count - 1,
            ")");
  if (count == 1) return x;
  Array out = empty_like(x.aval());
  if (comm_->index == root) std::memcpy(out.buffer()->data(), x.data(), x.nbytes());
  if (comm_->index != root) count_received(OpKind::broadcast, int64_t(x.nbytes()));
  stall_if_asked("broadcast", *comm_, sequence_ - 1, broken_by_);
  MPI_Request req;
  check_mpi(MPI_Ibcast(out.buffer()->data(), checked_count(int64_t(x.nbytes()), "broadcast", x.aval()), MPI_BYTE, root,
                       comm_->comm, &req),
            "MPI_Ibcast");
  wait_data(std::span(&req, 1), {&out}, timeout_seconds(), "broadcast", broken_by_, *comm_, sequence_ - 1);
  return out;
}

Array ProcessGroup::permute(const Array& x, const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  // MPI reads and writes host memory: an array on a device is staged.
  if (x.is_concrete() && x.device().kind != DeviceKind::cpu) {
    const Array out = permute(device_get(x), pairs);
    return x.committed() ? device_put(out, x.device()) : move_uncommitted(out, x.device());
  }
  finish_started_collectives();  // they come first, in every process
  initialize();
  const int count = comm_->count, me = comm_->index;
  check_input(x, "permute");
  check_usable("permute");
  int64_t from = -1, to = -1, digest = int64_t(pairs.size());
  for (const auto& [source, dest] : pairs) {
    PAX_CHECK(source >= 0 && source < count && dest >= 0 && dest < count, "pax::dist permute: the pair (", source, ", ",
              dest, ") names a process outside the ", count, " of axis '", axis_name_, "'");
    digest = digest * 1000003 + source * 1009 + dest;
    if (source == me) to = dest;
    if (dest == me) from = source;
  }
  agree(Header(OpKind::permute, sequence_++, &x.aval(), int64_t(pairs.size()), digest), timeout_seconds());
  Array out = from >= 0 ? empty_like(x.aval()) : zeros_like(x);
  if (from == me) return x;  // its own block stays
  std::vector<MPI_Request> reqs;
  const int bytes = checked_count(int64_t(x.nbytes()), "permute", x.aval());
  if (from >= 0) count_received(OpKind::permute, bytes);
  stall_if_asked("permute", *comm_, sequence_ - 1, broken_by_);
  if (to >= 0) {
    reqs.emplace_back();
    check_mpi(MPI_Isend(x.data(), bytes, MPI_BYTE, int(to), kTagPermute, comm_->comm, &reqs.back()), "MPI_Isend");
  }
  if (from >= 0) {
    reqs.emplace_back();
    check_mpi(MPI_Irecv(out.buffer()->data(), bytes, MPI_BYTE, int(from), kTagPermute, comm_->comm, &reqs.back()),
              "MPI_Irecv");
  }
  if (!reqs.empty()) wait_data(reqs, {&x, &out}, timeout_seconds(), "permute", broken_by_, *comm_, sequence_ - 1);
  return out;
}

Array ProcessGroup::reduce_scatter(const Array& x, ReduceOp op, int64_t axis) {
  // MPI reads and writes host memory: an array on a device is staged.
  if (x.is_concrete() && x.device().kind != DeviceKind::cpu) {
    const Array out = reduce_scatter(device_get(x), op, axis);
    return x.committed() ? device_put(out, x.device()) : move_uncommitted(out, x.device());
  }
  finish_started_collectives();  // they come first, in every process
  initialize();
  const int count = comm_->count;
  check_input(x, "reduce_scatter");
  check_usable("reduce_scatter");
  agree(Header(OpKind::reduce_scatter, sequence_++, &x.aval(), int64_t(op), axis), timeout_seconds());
  check_reducible(x.aval(), op, "reduce_scatter");
  PAX_CHECK(x.ndim() > 0, "pax::dist reduce_scatter: needs an array of rank >= 1, got ", x.aval().str());
  int64_t a = normalize_axis(axis, x.ndim(), "pax::dist reduce_scatter");
  PAX_CHECK(x.dim(a) % count == 0, "pax::dist reduce_scatter: axis ", a, " of ", x.aval().str(), " has size ", x.dim(a),
            ", not a multiple of the process count ", count);
  if (count == 1) return x;
  // Blocks are contiguous once the scattered axis leads.
  Array lead = a == 0 ? x : moveaxis(x, a, 0);
  Array in = lead.dtype() == wire_dtype(lead.dtype()) ? lead : lead.astype(wire_dtype(lead.dtype()));
  Shape block_shape = in.shape();
  block_shape[0] /= count;
  Array out = empty_like(AVal{block_shape, in.dtype(), in.weak_type()});
  count_received(OpKind::reduce_scatter, int64_t(out.nbytes()));
  stall_if_asked("reduce_scatter", *comm_, sequence_ - 1, broken_by_);
  MPI_Request req;
  check_mpi(MPI_Ireduce_scatter_block(in.data(), out.buffer()->data(),
                                      checked_count(block_shape.numel(), "reduce_scatter", x.aval()),
                                      mpi_type(in.dtype()), mpi_op(op), comm_->comm, &req),
            "MPI_Ireduce_scatter_block");
  wait_data(std::span(&req, 1), {&in, &out}, timeout_seconds(), "reduce_scatter", broken_by_, *comm_, sequence_ - 1);
  if (op == ReduceOp::mean) out = out / double(count);
  if (out.dtype() != x.dtype()) out = out.astype(x.dtype());
  return a == 0 ? out : moveaxis(out, 0, a);
}

}  // namespace pax::dist
