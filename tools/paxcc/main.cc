// The paxcc command. For now it prints its version and help; the experiment
// runner (--exp, --job_log_dir, --mode) arrives with the experiments layer.
#include <cstring>
#include <iostream>
#include <string>

#include "pax/pax.h"

namespace {

void print_help() {
  std::cout << "paxcc " << pax::version() << " - Pax experiments in C++ on a JAX-like array core\n\n"
            << "usage: paxcc [--help] [--version]\n\n"
            << "  --help      show this help\n"
            << "  --version   print the version\n\n"
            << "Running experiments (paxcc --exp=NAME --job_log_dir=DIR) is not available in this build yet.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc <= 1) {
    print_help();
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_help();
      return 0;
    }
    if (arg == "--version") {
      std::cout << "paxcc " << pax::version() << "\n";
      return 0;
    }
    std::cerr << "paxcc: unknown flag '" << arg << "'; valid flags: --help, --version\n";
    return 2;
  }
  return 0;
}
