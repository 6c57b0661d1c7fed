// Group normalisation arithmetic shared by the CPU loops and the CUDA kernels.
#pragma once

#include "kernels/math/host_device.h"

namespace ortmodule {

// dX of one element of a group of M elements normalised with mean and rstd (xhat = (x - mean)
// * rstd), from dyw = dy * scale[c] and the group's sums of dyw and of dyw * xhat.
ORTM_HOST_DEVICE double groupnorm_dx(double dyw, double xhat, double rstd, double sum_dyw,
                                     double sum_dyw_xhat, double M) {
  return rstd * (dyw - sum_dyw / M - xhat * (sum_dyw_xhat / M));
}

}  // namespace ortmodule
