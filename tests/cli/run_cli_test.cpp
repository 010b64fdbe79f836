// `gpumem run` as a user (and a careless or hostile one) drives it: options, environment, exit statuses,
// what the program is told. Signals and terminals: run_signals_test.cpp. The "program" is a shell command.
#include "cli/run_cli_fixture.hpp"

namespace {
using namespace gpumem::testing::run_cli;

TEST_F(RunCli, UnknownOrMalformedOptionsAreUsageErrorsBeforeTheProgramRuns) {
  const std::vector<std::vector<std::string>> bad = {
      {"--limt=1GiB"}, {"--quite"}, {"-x"}, {"--limit"}, {"--limit", ""}, {"--limit="}, {"--limit", "lots"},
      {"--limit", "0"}, {"--limit", "1KiB"}, {"--fraction", "1e-300"}, {"--fraction", "7"}, {"--fraction", "0.5x"},
      {"--backend", "bogus"}, {"--limit", "1GiB", "--fraction", "0.5"}, {"--limit", "1GiB", "--limit", "2GiB"},
      {"--report", (fs::path("/nonexistent-gpumem-dir") / "r.json").string()}, {"--report", "/"}};
  for (const auto& words : bad) {
    std::string shown;
    for (const auto& w : words) shown += "[" + w + "] ";
    const auto r = run_gpumem(with_marker_program(words, marker()), {});
    EXPECT_EQ(r.status, 2) << shown << r.err;
    EXPECT_FALSE(fs::exists(marker())) << shown << "ran the program";
    EXPECT_EQ(r.err.rfind("gpumem run: ", 0), 0u) << shown << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << shown << r.err;
  }
  // A share of the device given to --limit: the message names --fraction.
  const auto share = run_gpumem(with_marker_program({"--limit", "0.5"}, marker()), {});
  EXPECT_NE(share.err.find("use --fraction 0.5"), std::string::npos) << share.err;
  // `--report` followed by "--" is a missing value, never a file named "--".
  const auto r = run_gpumem({"run", "--report", "--", "true"}, {});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--report needs a value"), std::string::npos) << r.err;
}

TEST_F(RunCli, BadGpumemVariablesAreRefusedBeforeTheProgramRuns) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"GPUMEM_LIMIT", "garbage"}, {"GPUMEM_LIMIT", "0"},        {"GPUMEM_LIMIT", "100"},
      {"GPUMEM_FRACTION", "7"},    {"GPUMEM_FRACTION", "1e-300"}, {"GPUMEM_BACKEND", "bogus"},
      {"GPUMEM_SIM_CAPACITY", "x"}, {"GPUMEM_LIBRARY", "/nonexistent/libgpumem.so"},
      {"GPUMEM_CUDA_PAGE_MIB", "0"}, {"GPUMEM_CUDA_PAGE_MIB", "2MiB"}, {"GPUMEM_CUDA_PAGE_MIB", "-4"},
      {"GPUMEM_MAP_AHEAD", "2"},  {"GPUMEM_MAP_AHEAD", "maybe"}, {"GPUMEM_CONTROL", "nope"},
      {"GPUMEM_CONTROL", "offf"}, {"GPUMEM_COOPERATIVE", "fals"}, {"GPUMEM_COOPERATIVE", " 0"},
      {"GPUMEM_TRACE", (dir_ / "missing" / "t.jsonl").string()}, {"GPUMEM_TRACE", dir_.string()}};
  for (const auto& [name, value] : bad) {
    // The sim backend too: a switch only the cuda backend reads is refused all the same.
    for (const char* backend : {"cuda", "sim"}) {
      const auto r = run_gpumem(with_marker_program({}, marker()), {{name, value}, {"GPUMEM_BACKEND", backend}});
      EXPECT_EQ(r.status, 2) << name << "=" << value << ": " << r.err;
      EXPECT_FALSE(fs::exists(marker())) << name << "=" << value;
      EXPECT_EQ(r.err.rfind("gpumem run: " + name, 0), 0u) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      if (name == "GPUMEM_BACKEND") break;
    }
  }
  // Every spelling of on and off, in any case.
  for (const char* value : {"0", "1", "off", "ON", "No", "yes", "TRUE", "false"}) {
    const auto r = run_gpumem(
        with_marker_program({"-q"}, marker()),
        {{"GPUMEM_BACKEND", "sim"}, {"GPUMEM_CONTROL", value}, {"GPUMEM_COOPERATIVE", value}, {"GPUMEM_MAP_AHEAD", value}});
    EXPECT_EQ(r.status, 0) << value << ": " << r.err;
    EXPECT_TRUE(fs::exists(marker())) << value;
    fs::remove(marker());
  }
  // A trace in a directory that exists is the program's to write.
  EXPECT_EQ(run_gpumem(with_marker_program({"-q"}, marker()), {{"GPUMEM_TRACE", (dir_ / "t.jsonl").string()}}).status, 0);
  EXPECT_TRUE(fs::exists(marker()));
  fs::remove(marker());
  // "none" is how no limit is spelled, and --limit overrides the environment.
  EXPECT_EQ(run_gpumem(with_marker_program({"--limit", "none"}, marker()), {{"GPUMEM_LIMIT", "0"}}).status, 0);
  EXPECT_TRUE(fs::exists(marker()));
}

TEST_F(RunCli, ExitStatusAndArgumentsPassThroughVerbatim) {
  EXPECT_EQ(run_gpumem({"run", "-q", "--", "sh", "-c", "exit 7"}, {}).status, 7);
  const auto r = run_gpumem({"run", "-q", "--", "sh", "-c", "echo \"$@\"", "sh", "--limit", "x", "--", "-q"}, {});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "--limit x -- -q\n");
}

// A program that cannot be started: 127 when it (or its #! interpreter) is not found, 126 when it cannot
// be run, as a shell says, with a sentence that names what is missing.
TEST_F(RunCli, ProgramsThatCannotStartExitAsTheShellSays) {
  const fs::path script = dir_ / "script.py", plain = dir_ / "plain.py", crlf = dir_ / "crlf.sh";
  std::ofstream(script) << "#!/nonexistent/python3 -u\nprint(1)\n";
  std::ofstream(plain) << "print(1)\n";
  std::ofstream(crlf) << "#!/bin/sh\r\necho x\r\n";  // saved with Windows line endings
  fs::permissions(script, fs::perms::owner_all);
  fs::permissions(crlf, fs::perms::owner_all);
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"/nonexistent/program", 127, "cannot run '/nonexistent/program': no such file"},
      {"gpumem-no-such-program", 127, "cannot run 'gpumem-no-such-program': no such program in PATH"},
      {script.string(), 127, "cannot run '" + script.string() + "': its interpreter /nonexistent/python3 (on its #! line) does not exist"},
      {plain.string(), 126, "cannot run '" + plain.string() + "': Permission denied"},
      {dir_.string(), 126, "cannot run '" + dir_.string() + "': it is a directory"},
      {crlf.string(), 127, "cannot run '" + crlf.string() + "': its #! line ends in a carriage return (Windows line "
                           "endings), so the kernel looks for an interpreter named '/bin/sh\\r'; convert the file (dos2unix)"},
      {"", 127, "cannot run '': the program's name is empty"}};
  for (const auto& [program, code, said] : cases) {
    const auto r = run_gpumem({"run", "--", program}, {});
    EXPECT_EQ(r.status, code) << program << ": " << r.err;
    EXPECT_EQ(r.err, "gpumem run: " + said + "\n");
  }
}

// `gpumem --json run`: the hint names what run has, not a `gpumem run --json` it refuses.
TEST_F(RunCli, SummaryOptionsBeforeRunGetAHintThatWorks) {
  const auto r = run_gpumem({"--json", "run", "--", "true"}, {});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.find("gpumem run --json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gpumem run --report FILE"), std::string::npos) << r.err;
  const auto ps = run_gpumem({"--json", "ps"}, {});
  EXPECT_NE(ps.err.find("gpumem ps --json"), std::string::npos) << ps.err;
}

// PyTorch's allocator settings do not apply under gpumem: said once on stderr (not with -q, not when unset).
TEST_F(RunCli, PytorchAllocatorSettingsAreNamedAsNotApplying) {
  const auto told =
      run_gpumem({"run", "--", "sh", "-c", "echo ran"}, {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"}});
  EXPECT_EQ(told.status, 0) << told.err;
  EXPECT_EQ(told.out, "ran\n");
  EXPECT_NE(told.err.find("gpumem run: PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' configures PyTorch's own "
                          "allocator, which gpumem replaces in this program: its settings do not apply"),
            std::string::npos) << told.err;
  EXPECT_EQ(std::count(told.err.begin(), told.err.end(), '\n'), 1) << told.err;
  const auto newer = run_gpumem({"run", "--", "true"}, {{"PYTORCH_ALLOC_CONF", "expandable_segments:True"}});
  EXPECT_NE(newer.err.find("gpumem run: PYTORCH_ALLOC_CONF='expandable_segments:True' configures"), std::string::npos)
      << newer.err;  // its newer name
  const auto quiet = run_gpumem({"run", "-q", "--", "true"}, {{"PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"}});
  EXPECT_EQ(quiet.status, 0);
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(run_gpumem({"run", "--", "true"}, {{"PYTORCH_CUDA_ALLOC_CONF", ""}}).err, "");
}

// The summary reads the reports the program's processes leave in $GPUMEM_REPORT_DIR (gpumem_torch writes
// them at exit); here the program writes them itself. Memory held for other streams gets a line of its own,
// and so does the time the driver calls took.
TEST_F(RunCli, SummaryNamesMemoryHeldForOtherStreams) {
  const std::string write_reports =
      "echo '{\"pid\": 11, \"devices\": {\"0\": {\"peak_requested\": 1048576000, \"peak_allocated\": "
      "1048576000, \"peak_active\": 1258291200, \"peak_reserved\": 1283457024, \"num_ooms\": 0, "
      "\"driver_calls\": 12345, \"driver_us\": 348250}}}' > "
      "\"$GPUMEM_REPORT_DIR/report-11.json\"; "
      "echo '{\"pid\": 12, \"devices\": {\"0\": {\"peak_requested\": 1048576, \"peak_allocated\": 1048576, "
      "\"peak_active\": 1048576, \"peak_reserved\": 2097152, \"num_ooms\": 1}}}' > "
      "\"$GPUMEM_REPORT_DIR/report-12.json\"";
  const auto r = run_gpumem({"run", "--", "sh", "-c", write_reports}, {});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("pid 11 device 0: peak live 1000.00 MiB, peak reserved 1.20 GiB (1.224x), 0 OOMs"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pid 11 device 0: freed blocks that other streams still used kept up to 1.17 GiB in use "
                       "(peak reserved 1.020x that)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pid 12 device 0: peak live 1.00 MiB, peak reserved 2.00 MiB (2.000x), 1 OOMs"),
            std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pid 12 device 0: freed blocks"), std::string::npos) << r.err;  // none held: no line
  // The driver calls' cost, where the report has them (not for pid 12: no such keys).
  EXPECT_NE(r.err.find("pid 11 device 0: 12,345 driver calls to create, map and unmap pages took 348.2 ms of the "
                       "program's threads"),
            std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pid 12 device 0: 0 driver calls"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 4) << r.err;
}

// A relative TMPDIR gives the program absolute PYTHONPATH and GPUMEM_REPORT_DIR (it may change directory);
// one that is not a directory is named before the program starts.
TEST_F(RunCli, TemporaryDirectoryIsAbsoluteAndABadTmpdirIsNamed) {
  fs::create_directories(dir_ / "rel");
  const std::string paths = seen_after_cd("$PYTHONPATH $GPUMEM_REPORT_DIR", "TMPDIR", "rel");
  const std::string prefix = (dir_ / "rel" / "gpumem-run-").string();
  EXPECT_EQ(paths.rfind(prefix, 0), 0u) << paths;
  EXPECT_NE(paths.find(" " + prefix), std::string::npos) << paths;
  for (const std::string& bad : std::vector<std::string>{"/nonexistent-gpumem-tmp", (dir_ / "seen").string()}) {
    const auto r = run_gpumem(with_marker_program({}, marker()), {{"TMPDIR", bad}});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err, "gpumem run: TMPDIR=" + bad + " is not a directory (gpumem run makes its temporary directory there)\n");
    EXPECT_FALSE(fs::exists(marker()));
  }
  // A ':' would split the directory on the program's PYTHONPATH, and gpumem would silently not load.
  const fs::path colon = dir_ / "a:b";
  fs::create_directories(colon);
  const auto r = run_gpumem(with_marker_program({}, marker()), {{"TMPDIR", colon.string()}});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("has a ':' in its path, which PYTHONPATH cannot hold"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(marker()));
  // An empty TMPDIR means unset, as for mkstemp and Python.
  EXPECT_EQ(run_gpumem({"run", "-q", "--", "true"}, {{"TMPDIR", ""}}).status, 0);
}

// Without "--", the words after the program are the program's: its own --help, a "--" or "--limit" among
// its arguments (the parser read them as gpumem's and printed gpumem's help or refused them).
TEST_F(RunCli, WithoutDoubleDashTheProgramsWordsAreItsOwn) {
  auto r = run_gpumem({"run", "-q", "sh", "-c", "echo \"$@\"", "sh", "--help", "--", "a", "--limit"}, {});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "--help -- a --limit\n");
  r = run_gpumem({"run", "--limit", "none", "-q", "sh", "-c", "echo $GPUMEM_LIMIT"}, {});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "none\n");
  EXPECT_EQ(run_gpumem({"run", "--help"}, {}).status, 0);  // run's own help still works
}

// The report directory is the program's too: anything it leaves there that is not a report is left out with
// a line, and the program's status stands (a string pid made gpumem exit 1 with a JSON library's error).
TEST_F(RunCli, AMalformedReportIsLeftOutNotFatal) {
  const auto r = run_gpumem({"run", "--", "sh", "-c",
                             "echo '{\"pid\": \"x\", \"devices\": {}}' > \"$GPUMEM_REPORT_DIR/report-1.json\""}, {});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "gpumem run: report-1.json in its report directory is not a report gpumem wrote: left out\n");
}

// GPUMEM_TRACE is made absolute, as --report: the program may change its directory before it writes.
TEST_F(RunCli, ARelativeTracePathIsMadeAbsolute) {
  EXPECT_EQ(seen_after_cd("$GPUMEM_TRACE", "GPUMEM_TRACE", "t.jsonl"), (dir_ / "t.jsonl").string() + "\n");
}

// python -E / -I ignore PYTHONPATH and -S skips site, so gpumem cannot load into that Python: one warning
// line (not with -q), and the program runs.
TEST_F(RunCli, PythonOptionsThatKeepGpumemOutAreWarnedOf) {
  const fs::path python = dir_ / "python3.12";
  {
    std::ofstream(python) << "#!/bin/sh\nexit 0\n";
  }
  fs::permissions(python, fs::perms::owner_all);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-E", "train.py"}, "-E ignores PYTHONPATH"}, {{"-I", "-c", "pass"}, "-I ignores PYTHONPATH"},
      {{"-bS", "-m", "x"}, "-S imports no site module"}, {{"-W", "ignore", "-E"}, "-E ignores"},
      {{"-u", "train.py", "-E"}, ""}, {{"-c", "pass", "-I"}, ""}, {{"-mE"}, ""}, {{"-Wdefault", "x.py"}, ""},
      {{"-X", "E", "x.py"}, ""}};
  for (const auto& [options, said] : cases) {
    std::vector<std::string> args = {"run", "--", python.string()};
    args.insert(args.end(), options.begin(), options.end());
    const auto r = run_gpumem(args, {});
    EXPECT_EQ(r.status, 0) << options[0] << ": " << r.err;
    if (said.empty()) {
      EXPECT_EQ(r.err, "") << options[0];
      continue;
    }
    EXPECT_EQ(r.err.rfind("gpumem run: warning: python3.12 " + said, 0), 0u) << r.err;
    EXPECT_NE(r.err.find("gpumem does not load into it"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    args.insert(args.begin() + 1, "-q");
    EXPECT_EQ(run_gpumem(args, {}).err, "") << options[0];
  }
}

}  // namespace
