// A slow disk for the tests, loaded into a worker with LD_PRELOAD: every fsync (each
// file and folder a checkpoint flushes) first sleeps POPLAR_TEST_FSYNC_DELAY_MS.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

extern "C" int fsync(int fd) {
  using Fsync = int (*)(int);
  static const Fsync real_fsync = reinterpret_cast<Fsync>(::dlsym(RTLD_NEXT, "fsync"));
  if (const char* delay = std::getenv("POPLAR_TEST_FSYNC_DELAY_MS")) ::usleep(std::atoi(delay) * 1000);
  return real_fsync(fd);
}
