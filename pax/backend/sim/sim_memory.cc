// The sim device's guarded arena: a reserved range carved into blocks of the
// host cache's size classes (allocation_size_class), pages
// opened only while the stream runs, and a SIGSEGV handler that names a
// fault inside the range before the default action ends the process.
#include "pax/backend/sim/sim_memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "pax/core/error.h"

namespace pax::sim {
namespace {

size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

// Written once before the handler is installed, read by it.
char* g_base = nullptr;
size_t g_reserved = 0;
struct sigaction g_previous_segv;

void on_segv(int sig, siginfo_t* info, void* context) {
  const char* addr = static_cast<const char*>(info->si_addr);
  if (g_base && addr >= g_base && addr < g_base + g_reserved) {
    static const char msg[] =
        "pax: host code touched sim device memory through a pointer (read it with copy_to_host, to_vector, item "
        "or device_get; a kernel reaches it only on the sim stream)\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    signal(SIGSEGV, SIG_DFL);  // the faulting access repeats and ends the process
    return;
  }
  // Another fault: whatever handled it before.
  if (g_previous_segv.sa_flags & SA_SIGINFO) {
    if (g_previous_segv.sa_sigaction) return g_previous_segv.sa_sigaction(sig, info, context);
  } else if (g_previous_segv.sa_handler != SIG_DFL && g_previous_segv.sa_handler != SIG_IGN) {
    return g_previous_segv.sa_handler(sig);
  }
  signal(SIGSEGV, SIG_DFL);
}

class Arena {
 public:
  Arena() {
    size_t mb = 16384;
    if (const char* env = std::getenv("PAX_SIM_MEMORY_MB")) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(env, &end, 10);
      PAX_CHECK(end != env && *end == '\0' && v > 0, "PAX_SIM_MEMORY_MB='", env,
                "' is not a size in MiB; give a positive integer");
      mb = size_t(v);
    }
    reserved_ = mb << 20;
    void* p = mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    PAX_CHECK(p != MAP_FAILED, "sim device: cannot reserve ", format_bytes(double(reserved_)),
              " of address space (PAX_SIM_MEMORY_MB sets the size): ", std::strerror(errno));
    base_ = static_cast<char*>(p);
    g_base = base_;
    g_reserved = reserved_;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous_segv);
  }

  void* allocate(size_t capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<char*>& list = free_[capacity];
    in_use_ += capacity;
    if (!list.empty()) {
      char* p = list.back();
      list.pop_back();
      return p;
    }
    // Large blocks start on a page, so that a block never shares the pages
    // of smaller ones beyond what the size classes give.
    if (capacity >= page_size()) top_ = (top_ + page_size() - 1) / page_size() * page_size();
    PAX_CHECK(top_ + capacity <= reserved_, "out of sim device memory allocating ", format_bytes(double(capacity)),
              " (", format_bytes(double(in_use_ - capacity)), " in use of ", format_bytes(double(reserved_)),
              "; PAX_SIM_MEMORY_MB sets the size)");
    char* p = base_ + top_;
    top_ += capacity;
    const size_t mapped = (top_ + page_size() - 1) / page_size() * page_size();
    if (mapped > opened_ && open_) protect(opened_, mapped, PROT_READ | PROT_WRITE);
    if (open_) opened_ = std::max(opened_, mapped);
    return p;
  }

  void release(void* p, size_t capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= capacity;
    free_[capacity].push_back(static_cast<char*>(p));
  }

  void set_accessible(bool open) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t mapped = (top_ + page_size() - 1) / page_size() * page_size();
    if (open) {
      if (mapped) protect(0, mapped, PROT_READ | PROT_WRITE);
      opened_ = mapped;
    } else {
      if (opened_) protect(0, opened_, PROT_NONE);
      opened_ = 0;
    }
    open_ = open;
  }

  size_t in_use() {
    std::lock_guard<std::mutex> lock(mu_);
    return in_use_;
  }
  size_t reserved() const { return reserved_; }

 private:
  void protect(size_t from, size_t to, int prot) {
    PAX_CHECK(mprotect(base_ + from, to - from, prot) == 0, "sim device: mprotect failed: ", std::strerror(errno));
  }

  std::mutex mu_;
  char* base_ = nullptr;
  size_t reserved_ = 0;
  size_t top_ = 0;     // bytes handed out from the start of the range
  size_t opened_ = 0;  // bytes (whole pages) now readable and writable
  bool open_ = false;
  size_t in_use_ = 0;
  std::unordered_map<size_t, std::vector<char*>> free_;
};

Arena& arena() {
  // Leaked on purpose: buffers held by static Arrays are released late.
  static Arena* a = new Arena();
  return *a;
}

void release_block(void* data, size_t capacity, Device) { arena().release(data, capacity); }

}  // namespace

std::shared_ptr<Buffer> allocate(size_t nbytes, int index) {
  const Device device{DeviceKind::sim, index};
  if (nbytes == 0) return Buffer::wrap(nullptr, 0, 0, device, nullptr);
  const size_t capacity = allocation_size_class(nbytes);
  return Buffer::wrap(arena().allocate(capacity), nbytes, capacity, device, release_block);
}

void set_accessible(bool open) { arena().set_accessible(open); }

size_t bytes_in_use() { return arena().in_use(); }
size_t bytes_reserved() { return arena().reserved(); }

}  // namespace pax::sim
