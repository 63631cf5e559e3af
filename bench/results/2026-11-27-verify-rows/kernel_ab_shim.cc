// The entry points of the two builds of linear_kernel.cc, compiled with specdec renamed to
// specdec_before and specdec_after (same LinearProblem layout).
#include "common/model/linear_kernel.h"

namespace specdec_before::model {
struct LinearProblem;
void RunLinear(const LinearProblem& p);
}
namespace specdec_after::model {
struct LinearProblem;
void RunLinear(const LinearProblem& p);
}

void RunBefore(const specdec::model::LinearProblem& p) {
  specdec_before::model::RunLinear(
      reinterpret_cast<const specdec_before::model::LinearProblem&>(p));
}
void RunAfter(const specdec::model::LinearProblem& p) {
  specdec_after::model::RunLinear(reinterpret_cast<const specdec_after::model::LinearProblem&>(p));
}
