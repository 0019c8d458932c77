// TcpStoreClient: a Store that talks to a StoreServer over one authenticated TCP connection.
//
// One request at a time: callers take turns on the connection, and each request sends one frame
// and reads one response. Every request has a deadline that covers waiting for the turn and the
// I/O. A GET or WAIT hands the server whatever is left of the caller's timeout once its turn
// comes, and the client allows kServerReplyGraceMs more for the server's answer to arrive.
//
// The connection is never reused after a failure: a request that timed out on the client side
// may still be answered later, and that answer would be taken for the next request's. So any
// I/O error, timeout or malformed response closes it, and every later call is kUnavailable
// naming the server and the first failure. There is no silent reconnect: ADD and CAS are not
// idempotent, and a rank that lost its store has lost its job.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "comm/auth.h"
#include "comm/net/socket.h"
#include "comm/store/protocol.h"

namespace kiln::comm {
namespace {

using store::MessageType;
using store::Request;
using store::Response;

// The server answers a wait at its own deadline; this covers the network and a busy server
// between that moment and the answer reaching us.
constexpr int64_t kServerReplyGraceMs = 5000;

class TcpStoreClient final : public Store {
 public:
  TcpStoreClient(net::Fd fd, std::string address, int64_t request_timeout_ms)
      : address_(std::move(address)), request_timeout_ms_(request_timeout_ms), fd_(std::move(fd)) {}

  Status set(std::string_view key, std::string_view value) override {
    KILN_RETURN_IF_ERROR(store::check_key(key));
    KILN_RETURN_IF_ERROR(store::check_value(key, value));
    return call(store::set_request(key, value), Deadline::after_ms(request_timeout_ms_)).status();
  }

  Result<std::string> get(std::string_view key, int64_t timeout_ms) override {
    KILN_RETURN_IF_ERROR(store::check_key(key));
    const Request req = store::get_request(key, std::max<int64_t>(timeout_ms, 0));
    KILN_ASSIGN_OR_RETURN(Response resp, call(req, Deadline::after_ms(timeout_ms)));
    return std::move(resp.value);
  }

  Status wait(const std::vector<std::string>& keys, int64_t timeout_ms) override {
    KILN_RETURN_IF_ERROR(store::check_wait_keys(keys));
    const Request req = store::wait_request(keys, std::max<int64_t>(timeout_ms, 0));
    return call(req, Deadline::after_ms(timeout_ms)).status();
  }

  Result<int64_t> add(std::string_view key, int64_t delta) override {
    KILN_RETURN_IF_ERROR(store::check_key(key));
    KILN_ASSIGN_OR_RETURN(Response resp, call(store::add_request(key, delta),
                                              Deadline::after_ms(request_timeout_ms_)));
    return resp.number;
  }

  Result<std::string> compare_and_set(std::string_view key, std::string_view expected,
                                      std::string_view desired) override {
    KILN_RETURN_IF_ERROR(store::check_key(key));
    KILN_RETURN_IF_ERROR(store::check_value(key, expected));
    KILN_RETURN_IF_ERROR(store::check_value(key, desired));
    KILN_ASSIGN_OR_RETURN(Response resp, call(store::cas_request(key, expected, desired),
                                              Deadline::after_ms(request_timeout_ms_)));
    return std::move(resp.value);
  }

  Result<bool> remove(std::string_view key) override {
    KILN_RETURN_IF_ERROR(store::check_key(key));
    KILN_ASSIGN_OR_RETURN(
        Response resp, call(store::delete_request(key), Deadline::after_ms(request_timeout_ms_)));
    return resp.number != 0;
  }

 private:
  // Sends `req` and returns the server's OK response, or the error it stands for.
  Result<Response> call(Request req, Deadline deadline) {
    const std::string what =
        "store " + address_ + ": " + std::string(store::message_type_name(req.type));
    if (!acquire(deadline)) {
      return Status::timeout(what + ": another request held the connection until the deadline");
    }
    const Turn turn(this);
    if (!fd_.valid()) return broken_;
    Deadline io_deadline = deadline;
    if (req.type == MessageType::kGet || req.type == MessageType::kWait) {
      // The server may wait for what is left of the caller's timeout, and no longer.
      req.timeout_ms = std::min(req.timeout_ms, deadline.remaining_ms());
      io_deadline = req.timeout_ms > INT64_MAX - kServerReplyGraceMs
                        ? Deadline::never()
                        : Deadline::after_ms(req.timeout_ms + kServerReplyGraceMs);
    }
    Result<Response> resp = exchange(req, io_deadline, what);
    if (!resp.ok()) return fail(resp.status(), what);
    if (resp->code == StatusCode::kOk) return resp;
    const Status error(resp->code, resp->message);
    // The server says it is going away; the connection will not serve another request.
    if (error.is_unavailable()) return fail(error, what);
    return error;
  }

  // Takes the connection for one request, waiting until `deadline`. Returns false on timeout.
  bool acquire(Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    auto idle = [this] { return !busy_; };
    if (deadline.infinite()) {
      turn_over_.wait(lock, idle);
    } else if (!turn_over_.wait_until(lock, deadline.to_steady(), idle)) {
      return false;
    }
    busy_ = true;
    return true;
  }

  // Gives the connection back when a request is done.
  class Turn {
   public:
    explicit Turn(TcpStoreClient* client) : client_(client) {}
    ~Turn() {
      std::lock_guard<std::mutex> lock(client_->mu_);
      client_->busy_ = false;
      client_->turn_over_.notify_one();
    }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    TcpStoreClient* client_;  // not owned; outlives the turn
  };

  Result<Response> exchange(const Request& req, Deadline deadline, const std::string& what) {
    const std::string frame = store::encode_request(req);
    KILN_RETURN_IF_ERROR(net::write_all(fd_.get(), frame.data(), frame.size(), deadline, what));
    char prefix[store::kFrameLengthBytes];
    KILN_RETURN_IF_ERROR(net::read_exact(fd_.get(), prefix, sizeof(prefix), deadline, what));
    Result<size_t> body = store::decode_frame_length(std::string_view(prefix, sizeof(prefix)));
    if (!body.ok())
      return Status::unavailable(what + ": malformed response: " + body.status().message());
    std::string in(prefix, sizeof(prefix));
    in.resize(sizeof(prefix) + *body);
    KILN_RETURN_IF_ERROR(
        net::read_exact(fd_.get(), in.data() + sizeof(prefix), *body, deadline, what));
    Result<Response> resp = store::decode_response(in);
    if (!resp.ok())
      return Status::unavailable(what + ": malformed response: " + resp.status().message());
    return resp;
  }

  // Closes the connection for good and remembers why. A timeout stays a timeout for this call;
  // every later call is kUnavailable.
  Status fail(const Status& s, const std::string& what) {
    fd_.reset();
    const std::string why = s.message().starts_with(what) ? s.message() : what + ": " + s.message();
    broken_ = Status::unavailable("store " + address_ + ": connection lost (" + why + ")");
    if (s.is_timeout()) return Status::timeout(why);
    return broken_;
  }

  const std::string address_;
  const int64_t request_timeout_ms_;
  // One request at a time: a caller owns the connection while busy_ is true. fd_ and broken_ are
  // touched only by that owner, so the I/O runs without holding mu_. (A plain mutex and condition
  // variable rather than std::timed_mutex, whose timed lock ThreadSanitizer cannot see.)
  std::mutex mu_;
  std::condition_variable turn_over_;  // notified when busy_ turns false
  bool busy_ = false;                  // GUARDED_BY(mu_)
  net::Fd fd_;     // owned by the busy caller; invalid once the connection failed
  Status broken_;  // owned by the busy caller; why fd_ is invalid
};

}  // namespace

Result<std::unique_ptr<Store>> connect_tcp_store(const StoreClientOptions& options) {
  if (options.token.empty()) {
    return Status::invalid_argument("store client: the job token is empty");
  }
  KILN_ASSIGN_OR_RETURN(const net::HostPort address, net::parse_host_port(options.address));
  const Deadline deadline = Deadline::after_ms(options.connect_timeout_ms);
  KILN_ASSIGN_OR_RETURN(net::Fd fd, net::connect_tcp(address, deadline));
  const std::string name = address.to_string();
  const Status auth =
      authenticate_as_client(fd.get(), options.token, kAuthPurposeStore, deadline, name);
  if (auth.is_timeout()) {
    // Reached but never answered in time: to the caller the server cannot be reached.
    return Status::unavailable("store " + name + ": " + auth.message());
  }
  KILN_RETURN_IF_ERROR(auth);
  return std::unique_ptr<Store>(
      std::make_unique<TcpStoreClient>(std::move(fd), name, options.request_timeout_ms));
}

}  // namespace kiln::comm
