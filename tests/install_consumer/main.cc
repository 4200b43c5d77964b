// Links against an installed paxcc and checks one computation.
#include <iostream>

#include "pax/pax.h"

int main() {
  pax::Array x = pax::array<float>({1, 2, 3});
  float total = pax::sum(x * 2.0).item<float>();
  std::cout << "paxcc " << pax::version() << " sum=" << total << "\n";
  return total == 12.0f ? 0 : 1;
}
