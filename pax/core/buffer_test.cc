// What a failed allocation says: its size, what it was for, and the memory
// limit that applies.
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
  EXPECT_EQ(failed_allocation_bytes(), kImpossible);
  EXPECT_EQ(AllocationPurpose::describe_current(), "");
}

TEST(AllocationPurpose, AFailedOperatorNewIsRecordedWithoutANewHandler) {
  const std::new_handler previous = std::set_new_handler(nullptr);
  bool thrown = false;
  {
    const AllocationPurpose outer("training step 3");
    const AllocationPurpose purpose("the optimizer state");
    try {
      void* p = ::operator new(kImpossible + 128);
      ::operator delete(p);
    } catch (const std::bad_alloc&) {
      thrown = true;
    }
  }
  std::set_new_handler(previous);
  EXPECT_TRUE(thrown);
  EXPECT_EQ(failed_allocation_bytes(), kImpossible + 128);
  EXPECT_EQ(failed_allocation_purpose(), "the optimizer state (while training step 3)");
}

TEST(AllocationPurpose, TheRecordedPurposeIsCutToItsBuffer) {
  char out[16];
  {
    const AllocationPurpose purpose("a purpose much longer than sixteen characters");
    AllocationPurpose::describe_current_to(out, sizeof out);
  }
  EXPECT_EQ(std::string(out), "a purpose much ");
  AllocationPurpose::describe_current_to(out, sizeof out);
  EXPECT_EQ(std::string(out), "");
}

TEST(AllocationPurpose, AFailedBufferNamesTheMemoryLimit) {
  const MemoryLimitDescriber previous =
      set_memory_limit_describer([] { return std::string("the address-space limit of 150.0 MB"); });
  EXPECT_PAX_ERROR(Buffer::allocate(kImpossible),
                   " in use by arrays); the limit is the address-space limit of 150.0 MB");
  set_memory_limit_describer(nullptr);
  try {
    Buffer::allocate(kImpossible);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("the limit is"), std::string::npos) << e.what();
  }
  set_memory_limit_describer(previous);
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
