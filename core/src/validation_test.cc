// Queue names, job kinds, rates, bursts and rate-limit construction.
#include <conveyor/rate_limit.hpp>
#include <conveyor/validation.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace conveyor {
namespace {

constexpr const char* kQueueRule =
    ": use 1-128 characters from A-Z a-z 0-9 . _ : - starting with a letter or digit";

// The message validate_fn throws, or "" when it does not throw.
template <typename Fn>
std::string error_of(Fn&& validate_fn) {
  try {
    validate_fn();
  } catch (const ValidationError& e) {
    return e.what();
  }
  return "";
}

std::string queue_error(std::string_view name) {
  return error_of([&] { validate_queue_name(name); });
}

TEST(QueueName, AcceptsEveryAllowedForm) {
  for (const std::string& name : std::vector<std::string>{
           "a", "Z", "7", "email", "email:send", "email.send", "email_send", "email-send",
           "a:b.c_d-e", "0queue", "Q:1:2", std::string(128, 'x'), "a" + std::string(127, '-')}) {
    EXPECT_TRUE(is_valid_queue_name(name)) << name;
    EXPECT_NO_THROW(validate_queue_name(name)) << name;
  }
}

TEST(QueueName, RejectsBadForms) {
  for (const std::string& name : std::vector<std::string>{
           "", std::string(129, 'x'), "-email", ".email", ":email", "_email", "email send",
           " email", "email ", "\"email\"", "'email'", "x'); DROP TABLE jobs;--", "émail",
           "queue\xe2\x9c\x93", "a/b", "a\nb", std::string("a\0b", 3)}) {
    EXPECT_FALSE(is_valid_queue_name(name)) << name;
    EXPECT_THROW(validate_queue_name(name), ValidationError) << name;
  }
}

TEST(QueueName, MessageQuotesTheNameSafely) {
  EXPECT_EQ(queue_error("x'); DROP TABLE jobs;--"),
            std::string("invalid queue name \"x'); DROP TABLE jobs;--\"") + kQueueRule);
  EXPECT_EQ(queue_error(""), std::string("invalid queue name \"\"") + kQueueRule);
  EXPECT_EQ(queue_error("say \"hi\"\\"),
            std::string("invalid queue name \"say \\\"hi\\\"\\\\\"") + kQueueRule);
  EXPECT_EQ(queue_error("\xc3\xa9t\xc3\xa9\n"),
            std::string("invalid queue name \"\\xc3\\xa9t\\xc3\\xa9\\x0a\"") + kQueueRule);
}

TEST(QueueName, LongNameIsCutAndItsLengthShown) {
  EXPECT_EQ(queue_error(std::string(129, 'x')),
            "invalid queue name \"" + std::string(64, 'x') + "\"... (129 characters)" + kQueueRule);
}

TEST(QueueName, ErrorNamesTheField) {
  try {
    validate_queue_name("bad name");
    FAIL() << "no throw";
  } catch (const ValidationError& e) {
    EXPECT_EQ(e.field(), "queue");
  }
}

TEST(JobKind, AcceptsPrintableAsciiWithoutSpaces) {
  for (const std::string& kind :
       std::vector<std::string>{"noop", "sleep", "email.send", "a/b#c!", std::string(128, 'k')}) {
    EXPECT_NO_THROW(validate_job_kind(kind)) << kind;
  }
}

TEST(JobKind, RejectsBadKinds) {
  for (const std::string& kind :
       std::vector<std::string>{"", "has space", "tab\t", "caf\xc3\xa9", std::string(129, 'k')}) {
    EXPECT_THROW(validate_job_kind(kind), ValidationError) << kind;
  }
  EXPECT_EQ(error_of([] { validate_job_kind("has space"); }),
            "invalid job kind \"has space\": use 1-128 printable ASCII characters without spaces");
}

TEST(Rate, AcceptsPositiveFiniteNumbers) {
  for (double rate : {0.001, 0.5, 1.0, 10.0, 1e9}) EXPECT_NO_THROW(validate_rate(rate)) << rate;
}

TEST(Rate, RejectsNanInfinityZeroAndNegatives) {
  const std::string prefix = "rate must be a finite number greater than 0, got ";
  EXPECT_EQ(error_of([] { validate_rate(std::nan("")); }), prefix + "nan");
  EXPECT_EQ(error_of([] { validate_rate(std::numeric_limits<double>::infinity()); }),
            prefix + "inf");
  EXPECT_EQ(error_of([] { validate_rate(-std::numeric_limits<double>::infinity()); }),
            prefix + "-inf");
  EXPECT_EQ(error_of([] { validate_rate(0); }), prefix + "0");
  EXPECT_EQ(error_of([] { validate_rate(-1); }), prefix + "-1");
  EXPECT_EQ(error_of([] { validate_rate(-0.25); }), prefix + "-0.25");
}

// A subnormal rate (1e-320) used to pass and stall its queue after one job.
TEST(Rate, RejectsRatesBelowTheMinimumNamingIt) {
  EXPECT_NO_THROW(validate_rate(kMinRatePerSec));
  const std::string rule =
      "rate must be at least 0.001 jobs per second (one job every 1000 s; to stop a queue, "
      "pause it), got ";
  EXPECT_EQ(error_of([] { validate_rate(1e-320); }), rule + "1e-320");
  EXPECT_EQ(error_of([] { validate_rate(0.000999); }), rule + "0.000999");
  EXPECT_EQ(error_of([] { validate_rate(std::numeric_limits<double>::denorm_min()); }),
            rule + "5e-324");
}

TEST(Rate, PlainDecimalText) {
  const std::pair<const char*, double> good[] = {
      {"0", 0},     {"16", 16},    {"2.5", 2.5},   {".5", 0.5}, {"5.", 5},
      {"1e3", 1e3}, {"1E+3", 1e3}, {"25e-1", 2.5}, {"007", 7},  {"1000000000", 1e9}};
  for (const auto& [text, value] : good) EXPECT_EQ(parse_plain_decimal(text), value) << text;
  for (const char* bad : {"",    "0x10",  "0X10",  "0x1p4", "-1",       "+1",      " 1",  "1 ",
                          "1,5", "1_000", "inf",   "nan",   "infinity", "1e",      "1e+", ".",
                          "e5",  "1..2",  "1.2.3", "5/s",   "1e3x",     "\xd9\xa1"})
    EXPECT_EQ(parse_plain_decimal(bad), std::nullopt) << bad;
  // Out of double's range: huge reads as inf, tiny as the smallest
  // subnormal, so the range check says which way it is off.
  EXPECT_EQ(parse_plain_decimal("1e999"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(parse_plain_decimal("1e-999"), std::numeric_limits<double>::denorm_min());
}

// The CLI's --rate and CONVEYOR_RATE_LIMIT_RATE_PER_SEC: text, then range.
TEST(Rate, ParseRateNamesTheOptionAndSaysWhatToWrite) {
  EXPECT_EQ(parse_rate("2.5", "--rate"), 2.5);
  EXPECT_EQ(parse_rate("0.001", "--rate"), 0.001);
  EXPECT_EQ(error_of([] { (void)parse_rate("0x10", "--rate"); }),
            "--rate must be a plain decimal number of jobs per second from 0.001 to 1000000000 "
            "(digits with an optional fraction and exponent, e.g. 50, 2.5 or 1e3; no sign, "
            "hexadecimal, inf or nan), got \"0x10\"");
  EXPECT_EQ(error_of([] { (void)parse_rate("1e-320", "--rate"); }),
            "rate must be at least 0.001 jobs per second (one job every 1000 s; to stop a queue, "
            "pause it), got 1e-320");
  EXPECT_EQ(error_of([] { (void)parse_rate("0", "--rate"); }),
            "rate must be a finite number greater than 0, got 0");
  EXPECT_EQ(error_of([] { (void)parse_rate("2e9", "--rate"); }),
            "rate must be at most 1000000000 jobs per second, got 2e+09");
}

// 1e308 used to pass here and fail later in storage with a wrong message.
TEST(Rate, RejectsRatesAboveTheMaximumNamingIt) {
  EXPECT_NO_THROW(validate_rate(kMaxRatePerSec));
  EXPECT_EQ(error_of([] { validate_rate(1e308); }),
            "rate must be at most 1000000000 jobs per second, got 1e+308");
  EXPECT_EQ(error_of([] { validate_rate(1000000001); }),
            "rate must be at most 1000000000 jobs per second, got 1000000001");
}

TEST(Burst, BoundsDependOnZeroMeaningAuto) {
  EXPECT_NO_THROW(validate_burst(1, false));
  EXPECT_NO_THROW(validate_burst(4294967295, false));
  EXPECT_NO_THROW(validate_burst(0, true));
  EXPECT_EQ(error_of([] { validate_burst(0, false); }),
            "burst must be a whole number from 1 to 4294967295, got 0");
  EXPECT_EQ(error_of([] { validate_burst(-1, true); }),
            "burst must be a whole number from 0 to 4294967295 (0 means ceil(rate)), got -1");
  EXPECT_EQ(error_of([] { validate_burst(4294967296, false); }),
            "burst must be a whole number from 1 to 4294967295, got 4294967296");
}

TEST(AutoBurst, IsCeilOfRateAtLeastOne) {
  EXPECT_EQ(auto_burst(0.5), 1u);
  EXPECT_EQ(auto_burst(1), 1u);
  EXPECT_EQ(auto_burst(10), 10u);
  EXPECT_EQ(auto_burst(10.2), 11u);
  EXPECT_EQ(auto_burst(1e12), 4294967295u);
  EXPECT_EQ(auto_burst(std::numeric_limits<double>::infinity()), 4294967295u);
  EXPECT_EQ(auto_burst(std::nan("")), 1u);
}

TEST(MakeRateLimit, ResolvesZeroBurstAndValidates) {
  EXPECT_EQ(make_rate_limit(10.2, 0), (RateLimit{10.2, 11}));
  EXPECT_EQ(make_rate_limit(0.5, 0), (RateLimit{0.5, 1}));
  EXPECT_EQ(make_rate_limit(5, 3), (RateLimit{5, 3}));
  EXPECT_THROW(make_rate_limit(0, 1), ValidationError);
  EXPECT_THROW(make_rate_limit(5, -1), ValidationError);
  EXPECT_THROW(make_rate_limit(5, 4294967296), ValidationError);
}

TEST(MakeRateLimit, KeepsTheScope) {
  EXPECT_EQ(make_rate_limit(5, 3).scope, LimitScope::kProcess);
  EXPECT_EQ(make_rate_limit(5, 0, LimitScope::kFleet), (RateLimit{5, 5, LimitScope::kFleet}));
  EXPECT_THROW(make_rate_limit(0, 1, LimitScope::kFleet), ValidationError);
}

TEST(LimitScope, NamesParseBackAndAnythingElseIsRefused) {
  EXPECT_STREQ(to_string(LimitScope::kProcess), "process");
  EXPECT_STREQ(to_string(LimitScope::kFleet), "fleet");
  for (LimitScope s : {LimitScope::kProcess, LimitScope::kFleet})
    EXPECT_EQ(parse_limit_scope(to_string(s)), s);
  for (const char* bad : {"", "Fleet", "global", "process "}) {
    try {
      parse_limit_scope(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const ValidationError& e) {
      EXPECT_EQ(e.field(), "scope");
      EXPECT_EQ(std::string(e.what()),
                std::string("scope must be \"process\" (a bucket per process) or \"fleet\" (one "
                            "bucket for every process on the storage), got \"") +
                    bad + "\"");
    }
  }
}

TEST(SwitchSource, Names) {
  EXPECT_STREQ(to_string(SwitchSource::kConfig), "config");
  EXPECT_STREQ(to_string(SwitchSource::kStorage), "storage");
}

TEST(LimitSource, NamesMatchTheContract) {
  EXPECT_STREQ(to_string(LimitSource::kOverride), "override");
  EXPECT_STREQ(to_string(LimitSource::kQueueConfig), "queue-config");
  EXPECT_STREQ(to_string(LimitSource::kDefault), "default");
  EXPECT_STREQ(to_string(LimitSource::kNone), "none");
  EXPECT_STREQ(to_string(LimitSource::kDisabled), "disabled");
}

TEST(FormatNumber, IsShortestRoundTrip) {
  EXPECT_EQ(format_number(0.5), "0.5");
  EXPECT_EQ(format_number(10), "10");
  EXPECT_EQ(format_number(0.1), "0.1");
}

}  // namespace
}  // namespace conveyor
