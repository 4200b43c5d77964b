// Umbrella header of the optimizers: gradient transformations, wrappers and
// the ready-made optimizers and the learning-rate schedules (optax in C++).
#pragma once

#include "pax/optim/adaptive.h"
#include "pax/optim/aliases.h"
#include "pax/optim/configs.h"
#include "pax/optim/schedules.h"
#include "pax/optim/gradient_transformation.h"
#include "pax/optim/losses.h"
#include "pax/optim/basic_transforms.h"
#include "pax/optim/tree_utils.h"
#include "pax/optim/wrappers.h"
