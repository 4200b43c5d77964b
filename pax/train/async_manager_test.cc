// Tests for AsyncManager's destructor, which runs while other errors unwind:
// it waits for the write in flight, and neither throws nor ends the process.
#include "pax/train/async_manager.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>

#include "pax/testing/testing.h"

namespace pax::train {
namespace {

TEST(AsyncManager, DestructorWaitsForTheWriteInFlight) {
  std::atomic<bool> done{false};
  {
    AsyncManager m;
    m.run([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      done = true;
    });
  }
  EXPECT_TRUE(done);
}

// An uncollected failure is reported on stderr, not thrown, even while
// another error unwinds.
TEST(AsyncManager, AnUncollectedFailureDuringUnwindingIsNotThrown) {
  ::testing::internal::CaptureStderr();
  try {
    AsyncManager m;
    m.run([] { throw std::runtime_error("disk full"); });
    throw std::logic_error("the first error");
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "the first error");
  }
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("disk full"), std::string::npos);
}

// The write itself destroying its manager (join() would deadlock and throw)
// must not end the process from a destructor.
TEST(AsyncManager, DestroyedByItsOwnWriteDoesNotEndTheProcess) {
  auto* m = new AsyncManager;
  std::promise<void> done;
  m->run([&] {
    delete m;
    done.set_value();
  });
  done.get_future().wait();
}

}  // namespace
}  // namespace pax::train
