# The rendezvous store: the job-token handshake, the store's wire protocol, the server, the TCP
# and in-memory clients, and a libFuzzer target for the frame decoders. Included by
# src/comm/CMakeLists.txt, which builds the lists below into kiln_comm and kiln_comm_tests.
list(APPEND KILN_COMM_SOURCES
  auth.cc
  store/memory_store.cc
  store/protocol.cc
  store/store_server.cc
  store/table.cc
  store/tcp_store_client.cc)
list(APPEND KILN_COMM_TESTS
  auth_test.cc
  store/protocol_test.cc
  store/store_test.cc)

if(KILN_BUILD_TESTS)
  include(KilnFuzz)
  kiln_fuzz_target(NAME store_protocol
    SOURCES store/protocol_fuzz.cc store/protocol.cc
    SEED_SOURCES store/protocol_fuzz_seeds.cc store/protocol.cc)
endif()
