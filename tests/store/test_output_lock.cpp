// test_output_lock.cpp — one writer per output (store/output_lock.h): a held lock refuses the
// next writer naming the holder; a lock file left by a dead holder is taken over; the holder
// removes its file; and processes started together on one path, many times over, never both get it.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "store/output_lock.h"
#include "../sim/sim_test_util.h"

namespace moerl {
namespace {

using test::ScratchDir;
using test::expect_throw_with;

TEST(OutputLock, ASecondTakerIsRefusedNamingTheHolder) {
  ScratchDir dir;
  const std::string out = dir.file("r.h5");
  OutputLock a = OutputLock::take(out, "--out");
  EXPECT_TRUE(a.held());
  expect_throw_with<std::runtime_error>([&] { OutputLock::take(out, "--out"); },
                                        {out, "being written by another moerl", "pid " + std::to_string(getpid()),
                                         output_lock_path(out), "choose another --out"});
  a = OutputLock();  // released: the file goes, the next taker gets it
  EXPECT_FALSE(std::filesystem::exists(output_lock_path(out)));
  const OutputLock b = OutputLock::take(out, "--out");
  EXPECT_TRUE(b.held());
}

TEST(OutputLock, ALockFileLeftByADeadHolderIsTakenOver) {
  ScratchDir dir;
  const std::string out = dir.file("r.h5");
  std::ofstream(output_lock_path(out)) << "pid 999999 on host elsewhere since 2000-01-01 00:00:00\n";
  const OutputLock l = OutputLock::take(out, "--out");
  EXPECT_TRUE(l.held());
  EXPECT_NE(l.stale_holder().find("pid 999999"), std::string::npos) << l.stale_holder();
}

TEST(OutputLock, AMissingDirectoryFailsNamingThePath) {
  expect_throw_with<std::runtime_error>([] { OutputLock::take("/dev/null/r.h5", "--out"); },
                                        {"/dev/null/r.h5", "cannot create the lock file"});
}

// Processes released together by one pipe, 4 at a time, 40 rounds: each round exactly one gets
// the lock while the others are refused (each holder keeps it until every taker has tried).
TEST(OutputLock, ProcessesStartedTogetherNeverBothHoldIt) {
  ScratchDir dir;
  constexpr int kRounds = 40, kTakers = 4;
  for (int round = 0; round < kRounds; ++round) {
    const std::string out = dir.file("r" + std::to_string(round) + ".h5");
    int go[2], done[2];
    ASSERT_EQ(pipe(go), 0);
    ASSERT_EQ(pipe(done), 0);
    std::vector<pid_t> kids;
    for (int k = 0; k < kTakers; ++k) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        close(go[1]);
        close(done[0]);
        char c;
        if (read(go[0], &c, 1) != 0) _exit(3);  // EOF: everyone starts now
        int got = 0;
        try {
          const OutputLock l = OutputLock::take(out, "--out");
          got = 1;
          (void)!write(done[1], "x", 1);
          usleep(200000);  // hold it while the others try
        } catch (const std::exception&) {
          (void)!write(done[1], "x", 1);
        }
        _exit(got ? 0 : 1);
      }
      kids.push_back(pid);
    }
    close(go[0]);
    close(done[1]);
    close(go[1]);  // release them together
    int held = 0, refused = 0;
    for (pid_t pid : kids) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFEXITED(status));
      (WEXITSTATUS(status) == 0 ? held : refused) += 1;
    }
    close(done[0]);
    EXPECT_GE(held, 1) << "round " << round;
    // a second holder is only possible after the first released it (sequential, not together):
    // the holders keep it for 200 ms, far longer than the takers need to start
    EXPECT_EQ(held, 1) << "round " << round << ": " << held << " processes held the lock together";
    EXPECT_EQ(held + refused, kTakers);
    EXPECT_FALSE(std::filesystem::exists(output_lock_path(out)));
  }
}

}  // namespace
}  // namespace moerl
