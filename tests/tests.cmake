# SPDX-License-Identifier: MIT
# Tests beyond one-binary-per-module: the store conformance suite over
# every store, the S3 fixture, CLI tests that run the real binary.
set(TFS_S3_SERVER ${PROJECT_SOURCE_DIR}/scripts/s3-server)
set(TFS_WITH_S3 ${PROJECT_SOURCE_DIR}/scripts/with-s3)

# The local Ceph RGW: started once for every test that needs it, stopped
# afterwards unless someone else (make test) started it.
# (Its stdout carries the test keys: kept out of the test logs, which
# are scanned for secrets.)
add_test(NAME s3.start COMMAND sh -c "\"$0\" start --owner ctest >/dev/null"
  ${TFS_S3_SERVER})
add_test(NAME s3.stop COMMAND ${TFS_S3_SERVER} stop --owner ctest)
set_tests_properties(s3.start PROPERTIES FIXTURES_SETUP s3 TIMEOUT 120)
set_tests_properties(s3.stop PROPERTIES FIXTURES_CLEANUP s3 TIMEOUT 60)

function(tfs_conf name uri)
  add_test(NAME store.${name} COMMAND test_store_conf "${uri}")
  set_tests_properties(store.${name} PROPERTIES TIMEOUT 300 LABELS store)
endfunction()

function(tfs_s3_test name)
  add_test(NAME ${name} COMMAND ${TFS_WITH_S3} ${ARGN})
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED s3
    TIMEOUT 600 LABELS s3 RESOURCE_LOCK s3)
endfunction()

tfs_conf(posix "file://@TMP@")
tfs_conf(fault "fault+file://@TMP@")
tfs_conf(retry "retry+fault+file://@TMP@?error_rate=0.2&error=ECONNRESET&retries=12&retry_base_ms=1&retry_max_ms=4")

tfs_s3_test(store.s3 $<TARGET_FILE:test_store_conf>
  "s3://tierfs-test/conf?multipart_threshold=1M&part_size=256K")
tfs_s3_test(store.s3-retry $<TARGET_FILE:test_store_conf>
  "retry+fault+s3://tierfs-test/conf-retry?error_rate=0.1&error=ECONNRESET&retries=12&retry_base_ms=1&retry_max_ms=4&multipart_threshold=1M&part_size=256K")
if(TARGET test_s3_live)
  tfs_s3_test(unit.s3_live $<TARGET_FILE:test_s3_live>)
endif()
# The plain-HTTP GETs (s3_http.c, s3_sock.c) against a fake HTTP server
# in a thread of the test itself (127.0.0.1): a unit test, no S3 server.
add_test(NAME unit.s3_raw COMMAND test_s3_raw)
set_tests_properties(unit.s3_raw PROPERTIES TIMEOUT 120 LABELS unit)
# Two RGW gateways of the one cluster, one killed -9 mid-read (issue 16).
tfs_s3_test(s3.gateways ${PROJECT_SOURCE_DIR}/tests/integ/s3_gateways.sh
  $<TARGET_FILE:test_s3_gateways> ${TFS_S3_SERVER})
set_tests_properties(s3.gateways PROPERTIES TIMEOUT 120)

# The Python binding, with Debian's python3 (python3-pytest, python3-torch).
add_test(NAME python.store
  COMMAND ${TFS_WITH_S3} env TIERFS_LIB=$<TARGET_FILE:tierfs_shared>
          TFS_TEST_S3_URI=s3://tierfs-test
          PYTHONPATH=${PROJECT_SOURCE_DIR}/python PYTHONDONTWRITEBYTECODE=1
          /usr/bin/python3 -m pytest -q -p no:cacheprovider
          ${PROJECT_SOURCE_DIR}/python/tests/test_store.py)
set_tests_properties(python.store PROPERTIES LABELS python TIMEOUT 600
  FIXTURES_REQUIRED s3 RESOURCE_LOCK s3)

# The CLI, run for real against a directory and against the S3 server.
add_test(NAME cli.posix COMMAND ${PROJECT_SOURCE_DIR}/tests/integ/cli.sh
  $<TARGET_FILE:tierfs> /tmp/tfs-cli-posix)
set_tests_properties(cli.posix PROPERTIES LABELS cli TIMEOUT 300)
tfs_s3_test(cli.s3 ${PROJECT_SOURCE_DIR}/tests/integ/cli.sh
  $<TARGET_FILE:tierfs> s3://tierfs-test/cli)

# scripts/s3-server S3_TUNED=1: its own cluster, ports 7491/16791.
add_test(NAME s3.tuned COMMAND ${PROJECT_SOURCE_DIR}/tests/integ/s3_tuned.sh
  $<TARGET_FILE:tierfs> ${TFS_S3_SERVER})
set_tests_properties(s3.tuned PROPERTIES LABELS s3 TIMEOUT 180
  RESOURCE_LOCK s3)

# The cache tests again, with the S3 server as the remote.
tfs_s3_test(unit.cache-s3 env TFS_TEST_REMOTE=s3://tierfs-test/cache
  $<TARGET_FILE:test_cache>)
# End-to-end checks of store bytes: the ETag-MD5 cases need S3.
tfs_s3_test(unit.verify-s3 env TFS_TEST_REMOTE=s3://tierfs-test/verify
  $<TARGET_FILE:test_verify>)

# The FUSE mount (tests/integ/fuse_mount.c).
# Mounted for real with the tierfs binary, once over a directory and once
# over the S3 server; each run mounts and unmounts a dozen times.  A mount
# that fails is a failure; so is a machine without /dev/fuse (exit 77):
# the project's machines and CI have FUSE, so nothing here may skip.
add_executable(fuse_mount ${PROJECT_SOURCE_DIR}/tests/integ/fuse_mount.c)
target_include_directories(fuse_mount PRIVATE ${PROJECT_SOURCE_DIR}/src
  ${PROJECT_SOURCE_DIR}/tests/unit)
target_compile_definitions(fuse_mount PRIVATE _GNU_SOURCE)
target_link_libraries(fuse_mount PRIVATE tierfs_static)
tfs_warnings(fuse_mount)
target_compile_options(fuse_mount PRIVATE -Wno-missing-prototypes)
add_dependencies(fuse_mount tierfs)
add_test(NAME fuse.posix COMMAND env TFS_TEST_BIN=$<TARGET_FILE:tierfs>
  TFS_TEST_REMOTE=posix $<TARGET_FILE:fuse_mount>)
set_tests_properties(fuse.posix PROPERTIES LABELS fuse TIMEOUT 600)
tfs_s3_test(fuse.s3 env TFS_TEST_BIN=$<TARGET_FILE:tierfs>
  TFS_TEST_REMOTE=s3://tierfs-test/fuse $<TARGET_FILE:fuse_mount>)
set_tests_properties(fuse.s3 PROPERTIES LABELS "fuse;s3")

# tierfs bench and tierfs profile on tiny configurations (directory, store
# + cache, mount with a trace): documented JSON fields, sane values.
add_test(NAME cli.bench COMMAND ${PROJECT_SOURCE_DIR}/tests/integ/bench.sh
  $<TARGET_FILE:tierfs>)
set_tests_properties(cli.bench PROPERTIES LABELS "cli;fuse" TIMEOUT 600)

# Pack + loader: tierfs pack, the C reader, tierfs.torch.
# The C unit tests (tests/unit/test_pack*.c) register themselves above.
# Here: those of the reader's tests that touch the store, again with the
# packed dataset on the S3 server; and the Python side with Debian's
# python3 and python3-torch (GNU tar and tarfile listings, WebDataset
# grouping, DataLoader workers over a directory and over the S3 server,
# resumption, damage, the StallMeter).
foreach(t roundtrip damaged_header truncated_shard index_mismatch
          pack_resumes)
  tfs_s3_test(unit.pack_read-s3.${t} env
    TFS_TEST_REMOTE=s3://tierfs-test/pack $<TARGET_FILE:test_pack_read> ${t})
endforeach()
add_test(NAME python.pack
  COMMAND ${TFS_WITH_S3} env TIERFS_LIB=$<TARGET_FILE:tierfs_shared>
          TFS_TEST_BIN=$<TARGET_FILE:tierfs> TFS_TEST_S3_URI=s3://tierfs-test
          PYTHONPATH=${PROJECT_SOURCE_DIR}/python PYTHONDONTWRITEBYTECODE=1
          /usr/bin/python3 -m pytest -q -p no:cacheprovider
          -W ignore::UserWarning ${PROJECT_SOURCE_DIR}/python/tests/test_pack.py)
set_tests_properties(python.pack PROPERTIES LABELS "python;pack" TIMEOUT 600
  FIXTURES_REQUIRED s3 RESOURCE_LOCK s3)
# ShardDataset's defaults sized from its RAM tier, and the RAM tier
# warning once per training process (DataLoader workers, 2 epochs).
add_test(NAME python.pack-defaults
  COMMAND env TIERFS_LIB=$<TARGET_FILE:tierfs_shared>
          TFS_TEST_BIN=$<TARGET_FILE:tierfs>
          PYTHONPATH=${PROJECT_SOURCE_DIR}/python PYTHONDONTWRITEBYTECODE=1
          /usr/bin/python3 -m pytest -q -p no:cacheprovider
          ${PROJECT_SOURCE_DIR}/python/tests/test_pack_defaults.py)
set_tests_properties(python.pack-defaults PROPERTIES LABELS "python;pack"
  TIMEOUT 300)

# Order hints (MOUNT/.tierfs-prefetch) and tierfs.torch.OrderedPrefetch
# through a real mount of a directory store at 20 ms a request.
add_test(NAME python.hint
  COMMAND env TIERFS=$<TARGET_FILE:tierfs>
          PYTHONPATH=${PROJECT_SOURCE_DIR}/python PYTHONDONTWRITEBYTECODE=1
          /usr/bin/python3 -m pytest -q -p no:cacheprovider
          ${PROJECT_SOURCE_DIR}/python/tests/test_hint.py)
set_tests_properties(python.hint PROPERTIES LABELS "python;fuse" TIMEOUT 300)

# tierfs under torchrun (docs/dist.md): tierfs.torch.DistributedSampler
# against torch's, then bench/tools/dist_train.py with torchrun
# --nproc_per_node 4 (gloo): DDP from raw files in a real mount and from
# ShardDataset, checkpoints every 4 steps from all ranks behind
# fault+file:// (5 ms); one rank kill -9ed and the group restarted by
# --max_restarts (batches and final model equal an uninterrupted run's
# bit for bit), one 4 -> 2 world-size change mid-epoch; 60-100 s.
# Rendezvous ports 29621-29629.
add_test(NAME python.torchrun
  COMMAND env TIERFS_LIB=$<TARGET_FILE:tierfs_shared>
          TFS_TEST_BIN=$<TARGET_FILE:tierfs>
          PYTHONPATH=${PROJECT_SOURCE_DIR}/python PYTHONDONTWRITEBYTECODE=1
          /usr/bin/python3 -m pytest -q -p no:cacheprovider
          ${PROJECT_SOURCE_DIR}/python/tests/test_torchrun.py)
set_tests_properties(python.torchrun PROPERTIES LABELS "python;fuse;ckpt"
  TIMEOUT 300)

# Write-back in the mount (tests/integ/fuse_wb.c).
# Writes through the mounted binary, checked in the store itself: the
# semantics (read-your-writes, renames, deletes, sync), backpressure, 20
# kill -9 crash runs, upload failures.  Over a directory and over the S3
# server.  A mount that fails is a failure, and so is a machine without
# /dev/fuse.
add_executable(fuse_wb ${PROJECT_SOURCE_DIR}/tests/integ/fuse_wb.c)
target_include_directories(fuse_wb PRIVATE ${PROJECT_SOURCE_DIR}/src
  ${PROJECT_SOURCE_DIR}/tests/unit)
target_compile_definitions(fuse_wb PRIVATE _GNU_SOURCE)
target_link_libraries(fuse_wb PRIVATE tierfs_static)
tfs_warnings(fuse_wb)
target_compile_options(fuse_wb PRIVATE -Wno-missing-prototypes)
add_dependencies(fuse_wb tierfs)
add_test(NAME fuse.wb.posix COMMAND env TFS_TEST_BIN=$<TARGET_FILE:tierfs>
  TFS_TEST_REMOTE=posix $<TARGET_FILE:fuse_wb>)
set_tests_properties(fuse.wb.posix PROPERTIES LABELS "fuse;wb" TIMEOUT 600)
tfs_s3_test(fuse.wb.s3 env TFS_TEST_BIN=$<TARGET_FILE:tierfs>
  TFS_TEST_REMOTE=s3://tierfs-test/wb $<TARGET_FILE:fuse_wb>)
set_tests_properties(fuse.wb.s3 PROPERTIES LABELS "fuse;wb;s3")
# Transfers: an upload longer than one attempt, a refused change
# parked and named by sync and stats while the rest moves on.
add_test(NAME fuse.wb.xfer COMMAND ${PROJECT_SOURCE_DIR}/tests/integ/wb_xfer.sh
  $<TARGET_FILE:tierfs>)
set_tests_properties(fuse.wb.xfer PROPERTIES LABELS "fuse;wb" TIMEOUT 180)

# Checkpoints: src/ckpt, tierfs ckpt, tierfs.torch.
# The C unit tests (tests/unit/test_ckpt*.c) register themselves above and
# the fuzz targets (tests/fuzz/fuzz_safetensors.c, fuzz_ckpt_index.c) in
# the fuzz build.  Here: the Python side with Debian's python3 and
# python3-torch: a real model + optimizer saved by 1, 2 and 4 rank
# processes and restored bit for bit (also resharded), the shards opened
# by an independent safetensors reader, the CLI, damaged checkpoints, and
# 20 kill -9 runs, a save with one rank stopped or partitioned (stall:
# every rank's wait ends within commit_timeout + 10 s), durability levels
# and the recovery of a save killed after wait("local") (levels: 2 rank
# processes SIGKILLed before the commit, resumed by a new pair; about
# 15 s), the peer level (peer: a `tierfs serve` member keeps the copies,
# node A's staging is removed before the commit, a new pair recovers
# from the member; about 15 s); over a directory, and (torch, CLI) over
# the S3 server.
set(TFS_CKPT_ENV env TIERFS_LIB=$<TARGET_FILE:tierfs_shared>
  TFS_TEST_BIN=$<TARGET_FILE:tierfs>
  PYTHONPATH=${PROJECT_SOURCE_DIR}/python:${PROJECT_SOURCE_DIR}/python/tests
  PYTHONDONTWRITEBYTECODE=1)
set(TFS_CKPT_PYTEST /usr/bin/python3 -m pytest -q -p no:cacheprovider)
set(TFS_CKPT_DIR ${PROJECT_SOURCE_DIR}/python/tests)
foreach(t torch cli badinput crash stall levels peer)
  add_test(NAME ckpt.${t} COMMAND ${TFS_CKPT_ENV} TFS_TEST_CKPT_STORE=posix
    ${TFS_CKPT_PYTEST} ${TFS_CKPT_DIR}/test_ckpt_${t}.py)
  set_tests_properties(ckpt.${t} PROPERTIES LABELS "python;ckpt"
    TIMEOUT 600)
endforeach()
# Distributed: replicated state written once by 1, 2 and 4 ranks, one
# reader of the control state in a gloo group of 4 (ports 29631-29649),
# the TierfsError subclasses (issue 18 items 2, 5, 7).
add_test(NAME ckpt.dist COMMAND ${TFS_CKPT_ENV} ${TFS_CKPT_PYTEST}
  ${TFS_CKPT_DIR}/test_ckpt_dist.py)
set_tests_properties(ckpt.dist PROPERTIES LABELS "python;ckpt" TIMEOUT 300)
tfs_s3_test(ckpt.torch-s3 ${TFS_CKPT_ENV} TFS_TEST_CKPT_STORE=s3
  TFS_TEST_S3_URI=s3://tierfs-test ${TFS_CKPT_PYTEST}
  ${TFS_CKPT_DIR}/test_ckpt_torch.py ${TFS_CKPT_DIR}/test_ckpt_cli.py)
set_tests_properties(ckpt.torch-s3 PROPERTIES LABELS "python;ckpt;s3")

# The fault matrix, short form (docs/reliability.md).
# The relay bench/faults puts between tierfs and the S3 server, tested on
# its own; then the CI rows of the matrix (tests/integ/faults.sh).
add_test(NAME faults.relay COMMAND ${PROJECT_SOURCE_DIR}/tests/integ/faults_relay.sh
  $<TARGET_FILE:relay>)
set_tests_properties(faults.relay PROPERTIES LABELS faults TIMEOUT 60)
# The lossy disk under the disk rows (bench/tools/lazyfs.c), on its own.
add_test(NAME faults.lazyfs COMMAND ${PROJECT_SOURCE_DIR}/tests/integ/lazyfs.sh
  $<TARGET_FILE:lazyfs>)
set_tests_properties(faults.lazyfs PROPERTIES LABELS faults TIMEOUT 60)
add_test(NAME faults.ci COMMAND ${PROJECT_SOURCE_DIR}/tests/integ/faults.sh
  $<TARGET_FILE:tierfs>)
set_tests_properties(faults.ci PROPERTIES LABELS "faults;fuse" TIMEOUT 300)
# A training job killed -9 and resumed (torch: not in the sanitizer run).
add_test(NAME faults.train COMMAND ${PROJECT_SOURCE_DIR}/tests/integ/faults.sh
  $<TARGET_FILE:tierfs> train)
set_tests_properties(faults.train PROPERTIES LABELS "faults;python" TIMEOUT 300)

# Security (docs/security.md): private dirs, modes, credentials.
add_test(NAME security.posix COMMAND ${PROJECT_SOURCE_DIR}/tests/integ/security.sh
  $<TARGET_FILE:tierfs> $<TARGET_FILE:tierfs_shared>)
set_tests_properties(security.posix PROPERTIES LABELS "security;fuse"
  TIMEOUT 300 SKIP_RETURN_CODE 77)
tfs_s3_test(security.s3 ${PROJECT_SOURCE_DIR}/tests/integ/security.sh
  $<TARGET_FILE:tierfs> $<TARGET_FILE:tierfs_shared> s3://tierfs-test/security)
set_tests_properties(security.s3 PROPERTIES SKIP_RETURN_CODE 77)

# The cache group with real parts (tests/integ/group.sh, docs/group-test.md):
# 4 nodes, each a network namespace with its own mount and cache dir, the
# group over veth (htb-capped links), the RGW reached through the relay,
# which counts the store's egress; one shuffled epoch a node, every byte
# checked.  Without group support in the binary, the group cases are
# reported "# SKIP" and only the link and the no-group baseline run.
# Needs root (namespaces, mounts); about 15 s without the group cases.
tfs_s3_test(group.net ${PROJECT_SOURCE_DIR}/tests/integ/group.sh
  $<TARGET_FILE:tierfs> $<TARGET_FILE:relay>)
set_tests_properties(group.net PROPERTIES LABELS "s3;fuse;group" TIMEOUT 300)

# The cache group at scale, on paper (bench/group-sim --short,
# docs/group-sim.md): the model's invariants at 4 nodes and at 64 with
# unequal weights, placed by the real src/group/member.c: one store copy
# a cold epoch with the group and N without, a leave and a join move the
# changed member's share and nothing else, shares follow weights, the
# egress of membership changes stays within its bound, a timeout and
# suspect marks cut the slow peer's p99; and the calibration file.
add_test(NAME bench.group-sim COMMAND ${PROJECT_SOURCE_DIR}/bench/group-sim
  --short)
set_tests_properties(bench.group-sim PROPERTIES LABELS unit TIMEOUT 120
  ENVIRONMENT GROUPSIM=$<TARGET_FILE:groupsim>)

# The shared cache tier (tests/integ/shared_tier.sh, docs/group.md) against
# a second bucket of the S3 server: a node fills it, a cold node reads
# every block from it and none from the store, a corrupted copy is caught
# and healed, `tierfs tier gc` keeps what was read last.  About 30 s.
tfs_s3_test(tier.s3 ${PROJECT_SOURCE_DIR}/tests/integ/shared_tier.sh
  $<TARGET_FILE:tierfs>)
set_tests_properties(tier.s3 PROPERTIES LABELS "s3;fuse" TIMEOUT 180)

# The cache group's latency bench (bench/group-latency) in a short form:
# that it runs, every read's bytes right and from the tier meant, and its
# figures sane; the timed target is left to the bench (docs/group-latency.md).
add_test(NAME bench.grouplat COMMAND grouplat --quick)
set_tests_properties(bench.grouplat PROPERTIES LABELS bench TIMEOUT 120)
# bench/order-hint's short form: 1,000 files, the three epochs, every
# sample checked; the targets are printed, not checked.
add_test(NAME bench.order-hint
  COMMAND env TIERFS=$<TARGET_FILE:tierfs> BENCH_DIR=/var/tmp
          ${PROJECT_SOURCE_DIR}/bench/order-hint --quick
          --dir /var/tmp/tfs-order-hint-ctest)
set_tests_properties(bench.order-hint PROPERTIES LABELS "bench;python"
  TIMEOUT 300)

# bench/ckpt-nodes' short form: a 64 MiB replicated state saved by 1 and
# 4 ranks, each rank in a network namespace of its own; the bench fails
# unless the store holds one copy written by every rank.  The ratios are
# printed, not checked (docs/ckpt.md).
tfs_s3_test(bench.ckpt-nodes env TIERFS=$<TARGET_FILE:tierfs>
  WORLDS=1,4 SHARD_MIB=8 ${PROJECT_SOURCE_DIR}/bench/ckpt-nodes 64 1)
set_tests_properties(bench.ckpt-nodes PROPERTIES
  LABELS "bench;python;s3;ckpt" TIMEOUT 300)

# Mounting from a listing manifest (tests/integ/manifest.sh): every file
# read back, no LIST at mount (the daemon's counters; over S3 the RGW's
# access log too), bad manifests refused with their line.
add_test(NAME fuse.manifest.posix
  COMMAND ${PROJECT_SOURCE_DIR}/tests/integ/manifest.sh $<TARGET_FILE:tierfs>
  /tmp/tfs-manifest)
set_tests_properties(fuse.manifest.posix PROPERTIES LABELS fuse TIMEOUT 120)
tfs_s3_test(fuse.manifest.s3 ${PROJECT_SOURCE_DIR}/tests/integ/manifest.sh
  $<TARGET_FILE:tierfs> s3://tierfs-test/manifest)
set_tests_properties(fuse.manifest.s3 PROPERTIES LABELS "fuse;s3" TIMEOUT 180)

# bench/meta-million's short form (20,000 posix objects, about 20 s):
# every count right after mount, find, remount and a manifest mount.
add_test(NAME bench.meta-quick COMMAND env TIERFS=$<TARGET_FILE:tierfs>
  METABENCH=$<TARGET_FILE:metabench> ${PROJECT_SOURCE_DIR}/bench/meta-million
  --n 20000 --prefixes 100 --posix-only --work /tmp/tfs-meta-quick)
set_tests_properties(bench.meta-quick PROPERTIES LABELS "bench;fuse"
  TIMEOUT 120)
