// A case's charts in the HTML report: inline SVG polylines (one decimal per coordinate, no
// per-point elements), its phases' loss and grad_norm curves on one step axis, then each
// check's subject against its reference with the tolerance band and the first step outside it.
#pragma once

#include <string>

#include "report/summary_view.h"

namespace meshtest {

// The charts of case `c` in a <div class="charts">, "" when it has none. Labels are escaped.
std::string case_charts_html(const CaseView& c);

}  // namespace meshtest
