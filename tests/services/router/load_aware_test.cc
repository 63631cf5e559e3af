// LoadAwareChooser: a lone request speculates; under load both arms are explored until each has
// enough samples, then the faster one wins with periodic re-exploration; levels are independent.
#include "services/router/load_aware.h"

#include <gtest/gtest.h>

namespace specdec::services {
namespace {

using Arm = LoadAwareChooser::Arm;

TEST(LoadAwareChooser, LevelsBucketRequestsInFlight) {
  EXPECT_EQ(LoadAwareChooser::Level(0), 0);
  EXPECT_EQ(LoadAwareChooser::Level(1), 0);
  EXPECT_EQ(LoadAwareChooser::Level(2), 1);
  EXPECT_EQ(LoadAwareChooser::Level(4), 2);
  EXPECT_EQ(LoadAwareChooser::Level(5), 3);
  EXPECT_EQ(LoadAwareChooser::Level(16), 4);
  EXPECT_EQ(LoadAwareChooser::Level(100), 5);
  EXPECT_STREQ(LoadAwareChooser::LevelName(3), "5-8");
}

TEST(LoadAwareChooser, AloneAlwaysSpeculates) {
  LoadAwareChooser c;
  for (int i = 0; i < 10; ++i) c.Observe(1, Arm::kAr, 100, 0.1);  // AR looks much faster
  for (int i = 0; i < 20; ++i) EXPECT_EQ(c.Choose(1), Arm::kSpeculative);
}

TEST(LoadAwareChooser, ExploresThenExploitsTheFasterArmPerLevel) {
  LoadAwareChooser::Options o;
  o.min_samples = 3;
  o.explore_every = 5;
  LoadAwareChooser c(o);
  // Exploration alternates until both arms have 3 samples at level 5-8.
  int ar = 0, spec = 0;
  for (int i = 0; i < 6; ++i) {
    Arm a = c.Choose(8);
    (a == Arm::kAr ? ar : spec)++;
    // Under this load AR decodes 300 tok/s per request, speculation 200.
    c.Observe(8, a, a == Arm::kAr ? 300 : 200, 1.0);
  }
  EXPECT_EQ(ar, 3);
  EXPECT_EQ(spec, 3);
  EXPECT_DOUBLE_EQ(c.Rate(3, Arm::kAr), 300);
  // Exploiting: AR, except one in every 5 requests re-explores speculation.
  ar = spec = 0;
  for (int i = 0; i < 20; ++i) (c.Choose(8) == Arm::kAr ? ar : spec)++;
  EXPECT_EQ(spec, 4);
  EXPECT_EQ(ar, 16);
  // Another level knows nothing yet and explores on its own.
  EXPECT_EQ(c.Choose(2), Arm::kSpeculative);
  EXPECT_EQ(c.Samples(1, Arm::kAr), 0);
}

TEST(LoadAwareChooser, EstimatesFollowChangingConditions) {
  LoadAwareChooser::Options o;
  o.min_samples = 1;
  o.explore_every = 0;
  o.alpha = 0.5;
  LoadAwareChooser c(o);
  c.Observe(4, Arm::kAr, 300, 1.0);
  c.Observe(4, Arm::kSpeculative, 200, 1.0);
  EXPECT_EQ(c.Choose(4), Arm::kAr);
  for (int i = 0; i < 4; ++i) c.Observe(4, Arm::kAr, 100, 1.0);  // AR slowed down
  EXPECT_LT(c.Rate(2, Arm::kAr), 200);
  EXPECT_EQ(c.Choose(4), Arm::kSpeculative);
  c.Observe(4, Arm::kAr, 0, 1.0);  // empty samples are ignored
  c.Observe(4, Arm::kAr, 10, 0.0);
  EXPECT_EQ(c.Samples(2, Arm::kAr), 5);
}

}  // namespace
}  // namespace specdec::services
