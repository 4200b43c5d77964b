// What a failed allocation says: its size, and what it was for.
#include "pax/core/buffer.h"

#include <gtest/gtest.h>

#include <new>
#include <string>

#include "pax/testing/testing.h"

namespace pax {
namespace {

constexpr size_t kImpossible = size_t(1) << 62;  // 4.6 EB: no machine gives it

TEST(AllocationPurpose, AFailedBufferNamesItsPurposeAndTheOuterOnes) {
  EXPECT_PAX_ERROR(Buffer::allocate(kImpossible), "out of host memory allocating 4611686.0 TB (");
  const AllocationPurpose outer("training step 7");
  {
    const AllocationPurpose inner("a compiled program's intermediates");
    EXPECT_EQ(AllocationPurpose::describe_current(), "for a compiled program's intermediates (while training step 7)");
    EXPECT_PAX_ERROR(Buffer::allocate(kImpossible),
                     "TB for a compiled program's intermediates (while training step 7)");
  }
  EXPECT_EQ(AllocationPurpose::describe_current(), "for training step 7");
  // Small allocations still work after a failure.
  EXPECT_EQ(Buffer::allocate(100)->nbytes(), 100u);
}

TEST(AllocationPurpose, AFailedOperatorNewIsNoted) {
  const std::new_handler previous = std::set_new_handler(note_failed_allocation);
  bool thrown = false;
  {
    const AllocationPurpose purpose("the input batches");
    try {
      // A call, not a new-expression, which the compiler may elide.
      void* p = ::operator new(kImpossible);
      ::operator delete(p);
    } catch (const std::bad_alloc&) {
      thrown = true;
    }
  }
  std::set_new_handler(previous);
  EXPECT_TRUE(thrown);
  EXPECT_EQ(failed_allocation_purpose(), "the input batches");
  EXPECT_EQ(AllocationPurpose::describe_current(), "");
}

TEST(FormatBytes, DecimalUnits) {
  EXPECT_EQ(format_bytes(12), "12 B");
  EXPECT_EQ(format_bytes(45600), "45.6 KB");
  EXPECT_EQ(format_bytes(50.5e6), "50.5 MB");
  EXPECT_EQ(format_bytes(24.7e9), "24.7 GB");
  EXPECT_EQ(format_bytes(6144.1e9), "6.1 TB");
}

}  // namespace
}  // namespace pax
