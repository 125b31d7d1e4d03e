// A job's id: the name of its folder under every agent's work_dir/jobs/, chosen by the
// head (`poplar launch --job-id`) and checked again by each agent, so that no request
// names a path outside that folder.
#pragma once

#include <string>

namespace poplar {

// Throws InputError("job_id") unless the id is 1-64 characters of [A-Za-z0-9._-] and
// not "." or "..".
void CheckJobId(const std::string& job_id);

}  // namespace poplar
