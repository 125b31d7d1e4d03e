#include "planner/formats/job_id.h"

#include "planner/base/input_error.h"

namespace poplar {

void CheckJobId(const std::string& job_id) {
  const bool plain = !job_id.empty() && job_id.size() <= 64 && job_id != "." && job_id != ".." &&
                     job_id.find_first_not_of(
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                         "0123456789._-") == std::string::npos;
  if (!plain) {
    throw InputError("job_id", "", "'" + job_id + "' must be 1-64 characters of letters, digits, '.', '_' or '-'");
  }
}

}  // namespace poplar
