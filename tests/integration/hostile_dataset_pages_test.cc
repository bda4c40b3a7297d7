// Many datasets and ListDatasets: the answer comes a page at a time (50,000
// names in one answer were 11.8 MB, over gRPC's default 4 MiB receive
// limit), the clients follow the pages, and a page larger than the limit is
// refused naming the field and the limit.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "tally/client/client.h"
#include "tests/integration/hostile_fixture.h"

namespace tally::testing {
namespace {

class HostileDatasetPagesTest : public HostileClientTest {
 protected:
  grpc::Status Put(const std::string& name) {
    grpc::ClientContext ctx;
    v1::PutDatasetResponse resp;
    auto writer = stub_->PutDataset(&ctx, &resp);
    v1::PutDatasetRequest header;
    header.mutable_header()->set_name(name);
    header.mutable_header()->mutable_spec()->set_dtype(v1::DTYPE_UINT8);
    header.mutable_header()->mutable_spec()->set_length(1);
    v1::PutDatasetRequest chunk;
    chunk.set_chunk("\x01");
    writer->Write(header);
    writer->Write(chunk);
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status List(std::uint32_t page_size, const std::string& token, v1::ListDatasetsResponse* resp) {
    v1::ListDatasetsRequest r;
    r.set_page_size(page_size);
    r.set_page_token(token);
    grpc::ClientContext ctx;
    return stub_->ListDatasets(&ctx, r, resp);
  }
};

TEST_F(HostileDatasetPagesTest, ListingsComeInPagesThatTheClientsFollow) {
  Start(ServerConfig{});
  constexpr int kDatasets = 2500;
  std::vector<std::string> names;
  for (int i = 0; i < kDatasets; ++i) names.push_back(absl::StrFormat("set-%05d", i));
  std::atomic<int> next{0}, failed{0};
  std::vector<std::thread> uploaders;
  for (int t = 0; t < 4; ++t) {
    uploaders.emplace_back([&] {
      for (int i; (i = next++) < kDatasets;) failed += !Put(names[i]).ok();
    });
  }
  for (std::thread& t : uploaders) t.join();
  ASSERT_EQ(failed.load(), 0);

  // The default page is the largest, 1000 datasets; the token is the last name.
  std::vector<std::string> seen;
  std::vector<int> pages;
  std::string token;
  do {
    v1::ListDatasetsResponse page;
    ASSERT_TRUE(List(0, token, &page).ok());
    pages.push_back(page.datasets_size());
    for (const v1::DatasetInfo& d : page.datasets()) seen.push_back(d.name());
    EXPECT_EQ(page.places_size(), 1);  // every page tells the places' usage
    token = page.next_page_token();
    if (!token.empty()) {
      EXPECT_EQ(token, seen.back());
    }
  } while (!token.empty() && pages.size() < 10);
  EXPECT_EQ(pages, (std::vector<int>{1000, 1000, 500}));
  EXPECT_EQ(seen, names);

  v1::ListDatasetsResponse seven;
  ASSERT_TRUE(List(7, "set-00099", &seven).ok());
  ASSERT_EQ(seven.datasets_size(), 7);
  EXPECT_EQ(seven.datasets(0).name(), "set-00100");
  EXPECT_EQ(seven.next_page_token(), "set-00106");

  v1::ListDatasetsResponse refused;
  grpc::Status s = List(1001, "", &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("page_size"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("1000"), std::string::npos) << s.error_message();
  s = List(10, std::string("bad\ttoken"), &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("page_token"), std::string::npos) << s.error_message();

  // The C++ client (and with it `tally datasets`) follows every page.
  client::Client client(channel_);
  absl::StatusOr<v1::ListDatasetsResponse> all = client.ListDatasets(absl::Seconds(30));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->datasets_size(), kDatasets);
  EXPECT_EQ(all->datasets(kDatasets - 1).name(), names.back());
  EXPECT_TRUE(all->next_page_token().empty());
  EXPECT_EQ(all->places(0).datasets(), static_cast<std::uint64_t>(kDatasets));
  ExpectNothingHeld();
}

}  // namespace
}  // namespace tally::testing
