// Umbrella header: everything a paxcc user needs.
#pragma once

#include "pax/api/transforms.h"
#include "pax/core/array.h"
#include "pax/core/buffer.h"
#include "pax/core/dtype.h"
#include "pax/core/error.h"
#include "pax/core/shape.h"
#include "pax/core/tree.h"
#include "pax/core/version.h"
#include "pax/interp/interpreter.h"
#include "pax/ir/params.h"
#include "pax/ir/prims.h"
#include "pax/ops/lax.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/backend/backend.h"
