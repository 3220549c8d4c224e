// The whole ABI between the provider and the engine, in its three parts
// (uroce/abi_base.h explains them): include the part you need, or this.
#pragma once

#include "uroce/abi_base.h"
#include "uroce/abi_cm.h"
#include "uroce/abi_control.h"
#include "uroce/abi_rings.h"
