# Cross-compiling paxcc for aarch64 (arm64) Linux with Debian's
# g++-aarch64-linux-gnu. Used by scripts/check-aarch64.sh:
#
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
#
# The arm64 libraries come from a sysroot: a directory holding arm64 Debian
# packages extracted as they would be installed (usr/include,
# usr/lib/aarch64-linux-gnu, usr/share/cmake, ...). check-aarch64.sh builds one
# in build-aarch64/sysroot with mmdebstrap, because several of the packages
# (libsentencepiece0, libmunge2, libevent-dev: no Multi-Arch: same) cannot be
# installed beside their amd64 versions with dpkg --add-architecture arm64.
# PAX_AARCH64_SYSROOT (a CMake or environment variable) names another sysroot.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(PAX_AARCH64_TRIPLE aarch64-linux-gnu)

set(CMAKE_C_COMPILER ${PAX_AARCH64_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${PAX_AARCH64_TRIPLE}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${PAX_AARCH64_TRIPLE})

if(NOT PAX_AARCH64_SYSROOT)
  if(DEFINED ENV{PAX_AARCH64_SYSROOT} AND NOT "$ENV{PAX_AARCH64_SYSROOT}" STREQUAL "")
    set(PAX_AARCH64_SYSROOT "$ENV{PAX_AARCH64_SYSROOT}")
  else()
    get_filename_component(PAX_AARCH64_SYSROOT "${CMAKE_CURRENT_LIST_DIR}/../build-aarch64/sysroot" ABSOLUTE)
  endif()
endif()
# try_compile projects run this file again: hand them the choice.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES PAX_AARCH64_SYSROOT)
if(NOT IS_DIRECTORY "${PAX_AARCH64_SYSROOT}/usr/lib/${PAX_AARCH64_TRIPLE}")
  message(FATAL_ERROR "toolchain-aarch64: no arm64 sysroot at ${PAX_AARCH64_SYSROOT} "
                      "(run scripts/check-aarch64.sh, or set PAX_AARCH64_SYSROOT)")
endif()

set(CMAKE_SYSROOT "${PAX_AARCH64_SYSROOT}")
set(_pax_libdir "${PAX_AARCH64_SYSROOT}/usr/lib/${PAX_AARCH64_TRIPLE}")

# Headers, libraries and CMake packages only from the arm64 root; programs
# (pkg-config, the host's tools) from the build machine.
set(CMAKE_FIND_ROOT_PATH "${PAX_AARCH64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config (SentencePiece): the arm64 .pc files, their paths re-rooted.
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{PKG_CONFIG_LIBDIR} "${_pax_libdir}/pkgconfig:${PAX_AARCH64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${PAX_AARCH64_SYSROOT}")

# MPI: the host's mpicc would answer with amd64 libraries, so name the arm64
# Open MPI directly and skip the compiler wrappers.
set(MPI_SKIP_COMPILER_WRAPPER ON CACHE BOOL "cross build: no MPI wrapper")
set(MPI_C_LIB_NAMES mpi CACHE STRING "MPI C libraries to link against")
set(MPI_mpi_LIBRARY "${_pax_libdir}/openmpi/lib/libmpi.so" CACHE FILEPATH "arm64 Open MPI")
set(MPI_C_COMPILER_INCLUDE_DIRS "${_pax_libdir}/openmpi/include" CACHE STRING "arm64 Open MPI headers")
set(MPI_C_HEADER_DIR "${_pax_libdir}/openmpi/include" CACHE PATH "arm64 Open MPI headers")

# Target programs (gtest_discover_tests, ctest) run under qemu-user, with the
# sysroot as the prefix where their loader and libraries are looked up.
find_program(PAX_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(PAX_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${PAX_QEMU_AARCH64};-L;${PAX_AARCH64_SYSROOT}")
endif()
