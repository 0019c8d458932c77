// The store's frames. See protocol.h for the invariants; this is the format.
//
// Integers are little-endian and fixed-width; fixed64 fields holding signed values are two's
// complement. Every frame is a length and a body:
//
//   frame     := length:fixed32 body              length = |body|
//                                                 6 <= length <= kStoreFrameBytesMax - 4
//   body      := header payload                   nothing may follow the payload
//   header    := magic:fixed32 = 0x534e4c4b ("KLNS" on the wire)  version:u8 = 1  type:u8
//   string    := length:fixed32 byte[length]
//   key       := string                           1 <= length <= kStoreKeyBytesMax
//   value     := string                           length <= kStoreValueBytesMax
//
//   payload of type
//     SET      1  key value
//     GET      2  key timeout_ms:fixed64          timeout_ms >= 0: how long the server may wait
//     WAIT     3  count:fixed32 key{count} timeout_ms:fixed64      count <= kStoreWaitKeysMax
//     ADD      4  key delta:fixed64
//     CAS      5  key expected:value desired:value
//     DELETE   6  key
//     RESPONSE 128  code:u8 message:string value number:fixed64
//                   code is a kiln::StatusCode (0 = OK); message is empty iff code = 0 and at
//                   most kStoreMessageBytesMax; value is the value of GET and CAS; number is the
//                   new value of ADD and 1/0 for DELETE (the key existed or not)
//
// A decoder checks every length against both its limit and the bytes that remain before it
// touches them, so no input can make it read out of bounds or allocate more than the input size.
#include "comm/store/protocol.h"

#include <kiln/base/endian.h>

#include <algorithm>

namespace kiln::comm::store {
namespace {

constexpr uint32_t kMagic = 0x534e4c4b;  // "KLNS" in little-endian byte order
constexpr uint8_t kVersion = 1;
constexpr uint8_t kStatusCodeMax = static_cast<uint8_t>(StatusCode::kUnavailable);
// Keys and values are quoted in errors up to this many bytes: enough to recognise a path, short
// enough that a message about a 1 KiB key stays readable.
constexpr size_t kQuotedBytesMax = 128;

// ---- encoding

void put_fixed32(std::string* out, uint32_t v) {
  append_u32_le(out, v);
}

void put_fixed64(std::string* out, uint64_t v) {
  append_u64_le(out, v);
}

void put_string(std::string* out, std::string_view s) {
  KILN_CHECK_LE(s.size(), kStoreFrameBytesMax);
  put_fixed32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

// Starts a frame: a placeholder length, then the header.
std::string begin_frame(MessageType type, size_t payload_bytes_hint) {
  std::string out;
  out.reserve(kFrameLengthBytes + kFrameHeaderBytes + payload_bytes_hint);
  put_fixed32(&out, 0);
  put_fixed32(&out, kMagic);
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(type));
  return out;
}

// Writes the body length into the placeholder.
std::string finish_frame(std::string out) {
  KILN_CHECK_LE(out.size(), kStoreFrameBytesMax) << "an encoder exceeded the frame limit";
  const uint32_t body = static_cast<uint32_t>(out.size() - kFrameLengthBytes);
  encode_u32_le(body, out.data());
  return out;
}

// ---- decoding

// A cursor over untrusted bytes. Every read checks what remains first.
class Reader {
 public:
  // `what` names the part being decoded in errors ("header", "GET", ...).
  Reader(std::string_view in, std::string_view what) : in_(in), what_(what) {}

  Status fixed32(uint32_t* v, std::string_view field) {
    KILN_RETURN_IF_ERROR(need(4, field));
    *v = decode_u32_le(in_.data());
    in_.remove_prefix(4);
    return Status();
  }

  Status fixed64(uint64_t* v, std::string_view field) {
    KILN_RETURN_IF_ERROR(need(8, field));
    *v = decode_u64_le(in_.data());
    in_.remove_prefix(8);
    return Status();
  }

  Status u8(uint8_t* v, std::string_view field) {
    KILN_RETURN_IF_ERROR(need(1, field));
    *v = byte(0);
    in_.remove_prefix(1);
    return Status();
  }

  // A length-prefixed string of at most `bytes_max` bytes, as a view into the input.
  Status string(std::string_view* s, size_t bytes_max, std::string_view field) {
    uint32_t length = 0;
    KILN_RETURN_IF_ERROR(fixed32(&length, field));
    if (length > bytes_max) {
      return error(std::string(field) + " is " + std::to_string(length) +
                   " bytes, over the limit of " + std::to_string(bytes_max));
    }
    KILN_RETURN_IF_ERROR(need(length, field));
    *s = in_.substr(0, length);
    in_.remove_prefix(length);
    return Status();
  }

  Status key(std::string* out) {
    std::string_view s;
    KILN_RETURN_IF_ERROR(string(&s, kStoreKeyBytesMax, "key"));
    if (s.empty()) return error("key is empty");
    *out = std::string(s);
    return Status();
  }

  Status value(std::string* out, std::string_view field) {
    std::string_view s;
    KILN_RETURN_IF_ERROR(string(&s, kStoreValueBytesMax, field));
    *out = std::string(s);
    return Status();
  }

  Status timeout(int64_t* out) {
    uint64_t raw = 0;
    KILN_RETURN_IF_ERROR(fixed64(&raw, "timeout_ms"));
    *out = static_cast<int64_t>(raw);
    if (*out < 0) return error("timeout_ms is negative (" + std::to_string(*out) + ")");
    return Status();
  }

  Status finish() const {
    if (in_.empty()) return Status();
    return error(std::to_string(in_.size()) + " trailing bytes after the payload");
  }

  size_t remaining() const { return in_.size(); }

  Status error(const std::string& what) const {
    return Status::invalid_argument("store frame " + std::string(what_) + ": " + what);
  }

 private:
  uint8_t byte(size_t i) const { return static_cast<uint8_t>(in_[i]); }

  Status need(size_t bytes, std::string_view field) const {
    if (in_.size() >= bytes) return Status();
    return error("truncated: " + std::string(field) + " needs " + std::to_string(bytes) +
                 " bytes, " + std::to_string(in_.size()) + " remain");
  }

  std::string_view in_;
  std::string_view what_;
};

// Checks the length prefix against the frame and returns the body.
Result<std::string_view> frame_body(std::string_view frame) {
  if (frame.size() < kFrameLengthBytes) {
    return Status::invalid_argument("store frame: " + std::to_string(frame.size()) +
                                    " bytes is shorter than the length prefix");
  }
  KILN_ASSIGN_OR_RETURN(const size_t length, decode_frame_length(frame.substr(0, 4)));
  const std::string_view body = frame.substr(kFrameLengthBytes);
  if (body.size() != length) {
    return Status::invalid_argument("store frame: the prefix announces " + std::to_string(length) +
                                    " bytes, the frame holds " + std::to_string(body.size()));
  }
  return body;
}

// Reads and checks the header; returns the type.
Result<MessageType> read_header(std::string_view* body) {
  Reader r(*body, "header");
  uint32_t magic = 0;
  uint8_t version = 0;
  uint8_t type = 0;
  KILN_RETURN_IF_ERROR(r.fixed32(&magic, "magic"));
  KILN_RETURN_IF_ERROR(r.u8(&version, "version"));
  KILN_RETURN_IF_ERROR(r.u8(&type, "type"));
  if (magic != kMagic) return Status::invalid_argument("store frame: bad magic");
  if (version != kVersion) {
    return Status::invalid_argument("store frame: version " + std::to_string(version) +
                                    " is not supported (this build speaks " +
                                    std::to_string(kVersion) + ")");
  }
  const bool known = (type >= static_cast<uint8_t>(MessageType::kSet) &&
                      type <= static_cast<uint8_t>(MessageType::kDelete)) ||
                     type == static_cast<uint8_t>(MessageType::kResponse);
  if (!known) return Status::invalid_argument("store frame: unknown type " + std::to_string(type));
  body->remove_prefix(kFrameHeaderBytes);
  return static_cast<MessageType>(type);
}

Status decode_wait_keys(Reader* r, std::vector<std::string>* keys) {
  uint32_t count = 0;
  KILN_RETURN_IF_ERROR(r->fixed32(&count, "count"));
  if (count > kStoreWaitKeysMax) {
    return r->error("waits on " + std::to_string(count) + " keys, over the limit of " +
                    std::to_string(kStoreWaitKeysMax));
  }
  // Each key takes at least its length and one byte: a count the input cannot hold is rejected
  // before anything is reserved for it.
  if (static_cast<size_t>(count) * (kStringLengthBytes + 1) > r->remaining()) {
    return r->error("truncated: " + std::to_string(count) + " keys cannot fit in " +
                    std::to_string(r->remaining()) + " bytes");
  }
  keys->reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    KILN_RETURN_IF_ERROR(r->key(&keys->emplace_back()));
  }
  return Status();
}

Status decode_request_payload(Reader* r, Request* req) {
  switch (req->type) {
    case MessageType::kSet:
      KILN_RETURN_IF_ERROR(r->key(&req->key));
      return r->value(&req->value, "value");
    case MessageType::kGet:
      KILN_RETURN_IF_ERROR(r->key(&req->key));
      return r->timeout(&req->timeout_ms);
    case MessageType::kWait:
      KILN_RETURN_IF_ERROR(decode_wait_keys(r, &req->keys));
      return r->timeout(&req->timeout_ms);
    case MessageType::kAdd: {
      KILN_RETURN_IF_ERROR(r->key(&req->key));
      uint64_t delta = 0;
      KILN_RETURN_IF_ERROR(r->fixed64(&delta, "delta"));
      req->delta = static_cast<int64_t>(delta);
      return Status();
    }
    case MessageType::kCompareAndSet:
      KILN_RETURN_IF_ERROR(r->key(&req->key));
      KILN_RETURN_IF_ERROR(r->value(&req->expected, "expected value"));
      return r->value(&req->value, "desired value");
    case MessageType::kDelete: return r->key(&req->key);
    case MessageType::kResponse: break;
  }
  return r->error("a response where a request was expected");
}

size_t wait_keys_bytes(const std::vector<std::string>& keys) {
  size_t bytes = 0;
  for (const std::string& key : keys)
    bytes += kStringLengthBytes + key.size();
  return bytes;
}

}  // namespace

std::string_view message_type_name(MessageType type) {
  switch (type) {
    case MessageType::kSet: return "SET";
    case MessageType::kGet: return "GET";
    case MessageType::kWait: return "WAIT";
    case MessageType::kAdd: return "ADD";
    case MessageType::kCompareAndSet: return "CAS";
    case MessageType::kDelete: return "DELETE";
    case MessageType::kResponse: return "RESPONSE";
  }
  return "UNKNOWN";
}

std::string quote(std::string_view bytes) {
  if (bytes.size() <= kQuotedBytesMax) return "'" + std::string(bytes) + "'";
  return "'" + std::string(bytes.substr(0, kQuotedBytesMax)) + "...'";
}

Status check_key(std::string_view key) {
  if (key.empty()) return Status::invalid_argument("store: the key is empty");
  if (key.size() > kStoreKeyBytesMax) {
    return Status::invalid_argument("store: key " + quote(key) + " is " +
                                    std::to_string(key.size()) + " bytes, over the limit of " +
                                    std::to_string(kStoreKeyBytesMax) + " (kStoreKeyBytesMax)");
  }
  return Status();
}

Status check_value(std::string_view key, std::string_view value) {
  if (value.size() > kStoreValueBytesMax) {
    return Status::invalid_argument("store: value for key " + quote(key) + " is " +
                                    std::to_string(value.size()) + " bytes, over the limit of " +
                                    std::to_string(kStoreValueBytesMax) + " (kStoreValueBytesMax)");
  }
  return Status();
}

Status check_wait_keys(const std::vector<std::string>& keys) {
  if (keys.size() > kStoreWaitKeysMax) {
    return Status::invalid_argument("store: wait on " + std::to_string(keys.size()) +
                                    " keys, over the limit of " +
                                    std::to_string(kStoreWaitKeysMax) + " (kStoreWaitKeysMax)");
  }
  for (const std::string& key : keys)
    KILN_RETURN_IF_ERROR(check_key(key));
  return Status();
}

Request set_request(std::string_view key, std::string_view value) {
  Request req;
  req.type = MessageType::kSet;
  req.key = std::string(key);
  req.value = std::string(value);
  return req;
}

Request get_request(std::string_view key, int64_t timeout_ms) {
  Request req;
  req.type = MessageType::kGet;
  req.key = std::string(key);
  req.timeout_ms = timeout_ms;
  return req;
}

Request wait_request(std::vector<std::string> keys, int64_t timeout_ms) {
  Request req;
  req.type = MessageType::kWait;
  req.keys = std::move(keys);
  req.timeout_ms = timeout_ms;
  return req;
}

Request add_request(std::string_view key, int64_t delta) {
  Request req;
  req.type = MessageType::kAdd;
  req.key = std::string(key);
  req.delta = delta;
  return req;
}

Request cas_request(std::string_view key, std::string_view expected, std::string_view desired) {
  Request req;
  req.type = MessageType::kCompareAndSet;
  req.key = std::string(key);
  req.expected = std::string(expected);
  req.value = std::string(desired);
  return req;
}

Request delete_request(std::string_view key) {
  Request req;
  req.type = MessageType::kDelete;
  req.key = std::string(key);
  return req;
}

std::string encode_request(const Request& req) {
  std::string out;
  switch (req.type) {
    case MessageType::kSet:
      out = begin_frame(req.type, 2 * kStringLengthBytes + req.key.size() + req.value.size());
      put_string(&out, req.key);
      put_string(&out, req.value);
      break;
    case MessageType::kGet:
      out = begin_frame(req.type, kStringLengthBytes + req.key.size() + 8);
      put_string(&out, req.key);
      put_fixed64(&out, static_cast<uint64_t>(req.timeout_ms));
      break;
    case MessageType::kWait:
      out = begin_frame(req.type, 4 + wait_keys_bytes(req.keys) + 8);
      put_fixed32(&out, static_cast<uint32_t>(req.keys.size()));
      for (const std::string& key : req.keys)
        put_string(&out, key);
      put_fixed64(&out, static_cast<uint64_t>(req.timeout_ms));
      break;
    case MessageType::kAdd:
      out = begin_frame(req.type, kStringLengthBytes + req.key.size() + 8);
      put_string(&out, req.key);
      put_fixed64(&out, static_cast<uint64_t>(req.delta));
      break;
    case MessageType::kCompareAndSet:
      out = begin_frame(req.type, 3 * kStringLengthBytes + req.key.size() + req.expected.size() +
                                      req.value.size());
      put_string(&out, req.key);
      put_string(&out, req.expected);
      put_string(&out, req.value);
      break;
    case MessageType::kDelete:
      out = begin_frame(req.type, kStringLengthBytes + req.key.size());
      put_string(&out, req.key);
      break;
    case MessageType::kResponse: KILN_CHECK(false) << "encode_request given a response type";
  }
  return finish_frame(std::move(out));
}

std::string encode_response(const Response& resp) {
  KILN_CHECK_LE(resp.message.size(), kStoreMessageBytesMax);
  KILN_CHECK_EQ(resp.code == StatusCode::kOk, resp.message.empty());
  std::string out =
      begin_frame(MessageType::kResponse,
                  1 + 2 * kStringLengthBytes + resp.message.size() + resp.value.size() + 8);
  out.push_back(static_cast<char>(resp.code));
  put_string(&out, resp.message);
  put_string(&out, resp.value);
  put_fixed64(&out, static_cast<uint64_t>(resp.number));
  return finish_frame(std::move(out));
}

Result<size_t> decode_frame_length(std::string_view prefix) {
  KILN_CHECK_EQ(prefix.size(), kFrameLengthBytes);
  const uint32_t length = decode_u32_le(prefix.data());
  if (length < kFrameHeaderBytes || length > kStoreFrameBytesMax - kFrameLengthBytes) {
    return Status::invalid_argument("store frame: length " + std::to_string(length) +
                                    " is outside " + std::to_string(kFrameHeaderBytes) + ".." +
                                    std::to_string(kStoreFrameBytesMax - kFrameLengthBytes));
  }
  return static_cast<size_t>(length);
}

Result<Request> decode_request(std::string_view frame) {
  KILN_ASSIGN_OR_RETURN(std::string_view body, frame_body(frame));
  Request req;
  KILN_ASSIGN_OR_RETURN(req.type, read_header(&body));
  Reader r(body, message_type_name(req.type));
  KILN_RETURN_IF_ERROR(decode_request_payload(&r, &req));
  KILN_RETURN_IF_ERROR(r.finish());
  return req;
}

Result<Response> decode_response(std::string_view frame) {
  KILN_ASSIGN_OR_RETURN(std::string_view body, frame_body(frame));
  KILN_ASSIGN_OR_RETURN(const MessageType type, read_header(&body));
  Reader r(body, message_type_name(MessageType::kResponse));
  if (type != MessageType::kResponse) return r.error("a request where a response was expected");
  Response resp;
  uint8_t code = 0;
  KILN_RETURN_IF_ERROR(r.u8(&code, "code"));
  if (code > kStatusCodeMax) return r.error("unknown status code " + std::to_string(code));
  resp.code = static_cast<StatusCode>(code);
  std::string_view message;
  KILN_RETURN_IF_ERROR(r.string(&message, kStoreMessageBytesMax, "message"));
  if ((resp.code == StatusCode::kOk) != message.empty()) {
    return r.error("the message must be empty exactly when the code is OK");
  }
  resp.message = std::string(message);
  KILN_RETURN_IF_ERROR(r.value(&resp.value, "value"));
  uint64_t number = 0;
  KILN_RETURN_IF_ERROR(r.fixed64(&number, "number"));
  resp.number = static_cast<int64_t>(number);
  KILN_RETURN_IF_ERROR(r.finish());
  return resp;
}

std::string truncate_message(std::string message) {
  constexpr std::string_view kCut = " ... (truncated)";
  if (message.size() <= kStoreMessageBytesMax) return message;
  message.resize(kStoreMessageBytesMax - kCut.size());
  message.append(kCut);
  return message;
}

Response error_response(const Status& status) {
  KILN_CHECK(!status.ok()) << "error_response of an OK status";
  Response resp;
  resp.code = status.code();
  resp.message = truncate_message(status.message());
  if (resp.message.empty()) resp.message = std::string(status_code_name(status.code()));
  return resp;
}

}  // namespace kiln::comm::store
