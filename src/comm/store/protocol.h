// The rendezvous store's wire protocol: length-prefixed request and response frames.
//
// One connection carries one request at a time: the client sends a request frame and reads one
// response frame before it sends the next. The grammar is at the top of protocol.cc and in
// docs/store.md.
//
// Invariants:
//   - the decoders accept exactly what the encoders produce: a frame that decodes re-encodes to
//     the same bytes (the fuzz target checks this);
//   - a decoder never reads outside its input and never allocates more than its input's size
//     implies, whatever the input claims;
//   - every frame is at most kStoreFrameBytesMax bytes, length prefix included.
#ifndef KILN_COMM_STORE_PROTOCOL_H_
#define KILN_COMM_STORE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/base/result.h>
#include <kiln/base/status.h>
#include <kiln/comm/store.h>

namespace kiln::comm::store {

// The bytes before a frame's body: its length, fixed32.
inline constexpr size_t kFrameLengthBytes = 4;
// magic:fixed32 version:u8 type:u8
inline constexpr size_t kFrameHeaderBytes = 6;
// A fixed32 length before every string.
inline constexpr size_t kStringLengthBytes = 4;

// Error messages in responses are cut to this size: a wait on thousands of keys names only the
// first few missing ones, and a message never competes with the value for frame space.
inline constexpr size_t kStoreMessageBytesMax = 16 << 10;

// The largest legal request is a WAIT on kStoreWaitKeysMax keys of kStoreKeyBytesMax bytes
// (about 4.02 MiB); a CAS carries two values of kStoreValueBytesMax (about 2 MiB). 8 MiB admits
// both with room for the headers, and bounds what one malformed length prefix can make a reader
// buffer.
inline constexpr size_t kStoreFrameBytesMax = 8 << 20;

inline constexpr size_t kWaitRequestBytesMax =
    kFrameLengthBytes + kFrameHeaderBytes + 4 +
    kStoreWaitKeysMax * (kStringLengthBytes + kStoreKeyBytesMax) + 8;
inline constexpr size_t kCasRequestBytesMax = kFrameLengthBytes + kFrameHeaderBytes +
                                              3 * kStringLengthBytes + kStoreKeyBytesMax +
                                              2 * kStoreValueBytesMax;
inline constexpr size_t kResponseBytesMax = kFrameLengthBytes + kFrameHeaderBytes + 1 +
                                            2 * kStringLengthBytes + kStoreMessageBytesMax +
                                            kStoreValueBytesMax + 8;
static_assert(kWaitRequestBytesMax <= kStoreFrameBytesMax, "a full WAIT must fit in a frame");
static_assert(kCasRequestBytesMax <= kStoreFrameBytesMax, "a full CAS must fit in a frame");
static_assert(kResponseBytesMax <= kStoreFrameBytesMax, "a full response must fit in a frame");
static_assert(kStoreFrameBytesMax < (uint64_t{1} << 32), "the length prefix is 32 bits");

// Values are stable: they travel in frames.
enum class MessageType : uint8_t {
  kSet = 1,
  kGet = 2,
  kWait = 3,
  kAdd = 4,
  kCompareAndSet = 5,
  kDelete = 6,
  kResponse = 128,
};

// "SET", "GET", ...; for logs and errors.
std::string_view message_type_name(MessageType type);

// One request. Only the fields its type uses are set; the others keep their defaults (the
// decoder guarantees it, so decoded requests compare equal exactly when their bytes are equal).
struct Request {
  MessageType type = MessageType::kSet;
  std::string key;                // all but WAIT
  std::string value;              // SET: the value; CAS: the desired value
  std::string expected;           // CAS
  std::vector<std::string> keys;  // WAIT
  int64_t timeout_ms = 0;         // GET, WAIT: how long the server may wait; >= 0
  int64_t delta = 0;              // ADD

  friend bool operator==(const Request&, const Request&) = default;
};

// One builder per request type, setting exactly the fields the type uses.
Request set_request(std::string_view key, std::string_view value);
Request get_request(std::string_view key, int64_t timeout_ms);
Request wait_request(std::vector<std::string> keys, int64_t timeout_ms);
Request add_request(std::string_view key, int64_t delta);
Request cas_request(std::string_view key, std::string_view expected, std::string_view desired);
Request delete_request(std::string_view key);

struct Response {
  StatusCode code = StatusCode::kOk;
  std::string message;  // empty iff code is kOk
  std::string value;    // GET, CAS: the value
  int64_t number = 0;   // ADD: the new value; DELETE: 1 if the key existed, else 0

  friend bool operator==(const Response&, const Response&) = default;
};

// `bytes` in single quotes, cut after 128 bytes, for error messages.
std::string quote(std::string_view bytes);

// Checks a key or value against the store's limits; kInvalidArgument naming the limit.
// Shared by every Store implementation so that each rejects the same things the same way.
Status check_key(std::string_view key);
Status check_value(std::string_view key, std::string_view value);
Status check_wait_keys(const std::vector<std::string>& keys);

// The whole frame, length prefix included. REQUIRES: the request passes the checks above and
// its timeout is >= 0; a response message fits kStoreMessageBytesMax (use truncate_message).
std::string encode_request(const Request& request);
std::string encode_response(const Response& response);

// The body length a frame's 4-byte prefix announces. kInvalidArgument unless it lies between the
// smallest and the largest legal body. REQUIRES: prefix.size() == kFrameLengthBytes.
Result<size_t> decode_frame_length(std::string_view prefix);

// Decodes one whole frame (prefix included). kInvalidArgument names what is wrong: bad magic,
// version or type, a length that overruns, trailing bytes, a field over its limit.
Result<Request> decode_request(std::string_view frame);
Result<Response> decode_response(std::string_view frame);

// The response for a failed request, its message cut to kStoreMessageBytesMax.
Response error_response(const Status& status);
std::string truncate_message(std::string message);

}  // namespace kiln::comm::store

#endif  // KILN_COMM_STORE_PROTOCOL_H_
