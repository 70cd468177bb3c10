#pragma once
// Every configuration key psar knows, with type, default and meaning.
// docs/config.md is the prose version of this table.

#include "core/config.h"

namespace psar {

const Schema& config_schema();

}  // namespace psar
