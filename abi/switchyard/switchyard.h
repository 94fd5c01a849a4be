/* switchyard plugin ABI: include this one header. See docs/plugin-abi.md. */
#ifndef SWITCHYARD_SWITCHYARD_H
#define SWITCHYARD_SWITCHYARD_H

#include "abi.h"
#include "drafter.h"
#include "engine.h"

#endif /* SWITCHYARD_SWITCHYARD_H */
