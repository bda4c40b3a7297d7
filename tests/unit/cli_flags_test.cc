// The tool's flag parsing (client/tool/flags.h) on a small command of each
// kind of flag: both spellings of a value, and every line it refuses, with
// a message that names the flag.
#include "flags.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "help_formatter.h"

namespace tally::client::tool {
namespace {

// A command with a flag of every kind, parsed anew for each line.
struct Example {
  std::optional<std::string> ops, stream, threshold;
  std::optional<std::uint64_t> random;
  std::optional<absl::Duration> timeout;
  bool json = false;
  std::vector<std::string> files;
  std::unique_ptr<CLI::App> app;
  std::string out, err;

  Example() {
    app = MakeCommandApp("tally example", "usage: tally example [flags] FILE...\n", "Notes at the end.\n");
    StartGroup(*app, "Input");
    AddArguments(*app, "FILE", files, "files to read");
    AddSizeFlag(*app, "--random", random, "N", "random elements");
    StartGroup(*app, "Flags");
    AddTextFlag(*app, "--ops", ops, "LIST", "aggregations, comma-separated", "sum");
    AddTextFlag(*app, "--stream", stream, "MODE", "how to send");
    AddTextFlag(*app, "--stream-threshold", threshold, "BYTES", "when to stream");
    AddSecondsFlag(*app, "--timeout", timeout, "give up after this long", "no limit");
    AddSwitch(*app, "--json", json, "print JSON");
  }

  // The exit code ParseCommandLine stops with, or -1 to go on.
  int Parse(const std::vector<std::string>& args, absl::Status check = absl::OkStatus()) {
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    const std::optional<int> exit = ParseCommandLine(*app, args, [&] { return check; });
    out = testing::internal::GetCapturedStdout();
    err = testing::internal::GetCapturedStderr();
    return exit.value_or(-1);
  }
};

TEST(ParseCommandLine, TakesValuesAfterEqualsOrAsTheNextWord) {
  for (const std::vector<std::string>& line :
       {std::vector<std::string>{"--ops", "sum,max", "--random", "4K", "--timeout", "2.5", "a.npy"},
        {"--ops=sum,max", "--random=4K", "--timeout=2.5", "a.npy"},
        {"a.npy", "--ops=sum,max", "--random", "4K", "--timeout=2.5"}}) {
    Example e;
    ASSERT_EQ(e.Parse(line), -1) << e.err;
    EXPECT_EQ(e.ops, "sum,max");
    EXPECT_EQ(e.random, 4000u);
    EXPECT_EQ(e.timeout, absl::Milliseconds(2500));
    EXPECT_EQ(e.files, std::vector<std::string>{"a.npy"});
    EXPECT_FALSE(e.json);
    EXPECT_EQ(e.err, "");
  }
}

TEST(ParseCommandLine, SwitchesStandAloneOrTakeTrueAndFalseAfterEquals) {
  Example on;
  ASSERT_EQ(on.Parse({"--json", "x.npy"}), -1) << on.err;
  EXPECT_TRUE(on.json);
  EXPECT_EQ(on.files, std::vector<std::string>{"x.npy"});  // not taken as the switch's value
  Example off;
  ASSERT_EQ(off.Parse({"--json=false"}), -1) << off.err;
  EXPECT_FALSE(off.json);
}

TEST(ParseCommandLine, BinaryAndDecimalSuffixes) {
  Example e;
  ASSERT_EQ(e.Parse({"--random", "2Mi"}), -1) << e.err;
  EXPECT_EQ(e.random, 2u << 20);
  Example d;
  ASSERT_EQ(d.Parse({"--random=2M"}), -1) << d.err;
  EXPECT_EQ(d.random, 2'000'000u);
}

TEST(ParseCommandLine, EqualsWithNothingAfterIsAnEmptyValueNotTheNextWord) {
  Example e;
  ASSERT_EQ(e.Parse({"--ops=", "a.npy"}), -1) << e.err;
  EXPECT_EQ(e.ops, "");
  EXPECT_EQ(e.files, std::vector<std::string>{"a.npy"});
}

TEST(ParseCommandLine, AValueThatStartsWithADashNeedsEquals) {
  Example e;
  EXPECT_EQ(e.Parse({"--ops", "--json"}), 2);
  EXPECT_NE(e.err.find("--ops needs a value"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("--ops=VALUE"), std::string::npos) << e.err;
  Example explicit_value;
  ASSERT_EQ(explicit_value.Parse({"--ops=--json"}), -1) << explicit_value.err;
  EXPECT_EQ(explicit_value.ops, "--json");
  EXPECT_FALSE(explicit_value.json);
}

TEST(ParseCommandLine, WordsAfterDoubleDashAreArguments) {
  Example e;
  ASSERT_EQ(e.Parse({"--json", "--", "--ops", "-x.npy"}), -1) << e.err;
  EXPECT_EQ(e.files, (std::vector<std::string>{"--ops", "-x.npy"}));
  EXPECT_FALSE(e.ops.has_value());
}

// Each refused line, and words its message must hold: the flag, and what
// to do instead.
struct Refused {
  std::vector<std::string> line;
  std::vector<std::string> words;
};

TEST(ParseCommandLine, RefusesWhatItCannotReadUnambiguously) {
  const Refused cases[] = {
      {{"--frobnicate"}, {"unknown flag --frobnicate"}},
      {{"--op=sum"}, {"unknown flag --op", "did you mean --ops?"}},
      {{"--jsno"}, {"unknown flag --jsno", "--json"}},
      {{"--str=always"}, {"unknown flag --str", "--stream or --stream-threshold"}},
      {{"-j"}, {"unknown option -j", "--name=value or --name value"}},
      {{"--ops=sum", "--ops=max"}, {"--ops", "given more than once"}},
      {{"--ops"}, {"--ops needs a value"}},
      {{"--json", "false"}, {"--json takes no separate value", "--json=false"}},
      {{"--json", "true", "a.npy"}, {"--json takes no separate value"}},
      {{"--random=4X"}, {"--random", "\"4X\"", "powers of 1000", "powers of 1024"}},
      {{"--random", "1.5"}, {"--random", "fraction needs a suffix"}},
      {{"--timeout=0"}, {"--timeout", "seconds > 0"}},
      {{"--json=maybe"}, {"--json=maybe: expected --json, --json=true or --json=false"}},
      {{"--ops", "--json"}, {"--ops needs a value"}},
  };
  for (const Refused& c : cases) {
    Example e;
    EXPECT_EQ(e.Parse(c.line), 2) << c.line[0];
    for (const std::string& w : c.words) EXPECT_NE(e.err.find(w), std::string::npos) << w << " in " << e.err;
    EXPECT_NE(e.err.find("tally example: "), std::string::npos) << e.err;
    EXPECT_NE(e.err.find("(see tally example --help)"), std::string::npos) << e.err;
    EXPECT_EQ(e.out, "");
  }
}

TEST(ParseCommandLine, ArgumentsACommandDoesNotTakeAreRefused) {
  Example e;
  e.app = MakeCommandApp("tally bare", "usage: tally bare\n", "");
  EXPECT_EQ(e.Parse({"stray"}), 2);
  EXPECT_NE(e.err.find("unexpected argument stray"), std::string::npos) << e.err;
}

TEST(ParseCommandLine, TheChecksBetweenFlagsRunLastAndAreUsageErrors) {
  Example e;
  EXPECT_EQ(e.Parse({"--json"}, absl::InvalidArgumentError("--json needs --ops")), 2);
  EXPECT_NE(e.err.find("tally example: --json needs --ops"), std::string::npos) << e.err;
}

TEST(ParseCommandLine, HelpComesFirstWhateverElseIsOnTheLine) {
  Example e;
  EXPECT_EQ(e.Parse({"--random=4X", "--help"}), 0);
  EXPECT_EQ(e.err, "");
  // The command's text, each group's flags with their values and defaults,
  // then its notes.
  for (const char* words : {"usage: tally example [flags] FILE...", "Input:", "  FILE ", "files to read",
                            "  --random=N ", "Flags:", "  --ops=LIST ", "(default sum)",
                            "  --timeout=SECONDS ", "(default no limit)", "  --json ", "Notes at the end."}) {
    EXPECT_NE(e.out.find(words), std::string::npos) << words << " in\n" << e.out;
  }
  EXPECT_EQ(e.out.find("--json="), std::string::npos) << e.out;  // a switch has no value
  Example after_double_dash;
  EXPECT_EQ(after_double_dash.Parse({"--", "--help"}), -1);  // an argument named --help
}

TEST(WrapText, KeepsWithinTheWidthAndIndentsFollowingLines) {
  EXPECT_EQ(WrapText("aaa bbb ccc", 0, 7), "aaa bbb\nccc");
  EXPECT_EQ(WrapText("aaa bbb ccc", 4, 11), "aaa bbb\n    ccc");
  EXPECT_EQ(WrapText("one\ntwo", 2, 80), "one\n  two");
  EXPECT_EQ(WrapText("averyveryverylongword x", 0, 5), "averyveryverylongword\nx");
}

}  // namespace
}  // namespace tally::client::tool
