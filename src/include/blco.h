/* blco: out-of-core streaming of sparse tensors in the BLCO format. The whole public API. */
#ifndef BLCO_H
#define BLCO_H

#include "blco/core.h"
#include "blco/coo.h"
#include "blco/tns.h"
#include "blco/layout.h"
#include "blco/mttkrp.h"
#include "blco/gen.h"
#include "blco/npy.h"
#include "blco/outfile.h"
#include "blco/device.h"
#include "blco/cuda.h"
#include "blco/file.h"
#include "blco/pack.h"
#include "blco/stats.h"
#include "blco/aio.h"
#include "blco/cpd.h"
#include "blco/stream.h"
#include "blco/dist.h"
#include "blco/tucker.h"
#include "blco/labels.h"

#endif
