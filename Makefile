# SPDX-License-Identifier: MIT
# The front door.  CMake does the building; this file names the jobs.
#
#   make              build into build/
#   make deps         install the Debian packages (idempotent)
#   make demo         install, build, run the main demo (~2 minutes)
#   make test         install, build (release, ASan/UBSan, fuzz), run
#                     every test with the local S3 server
#   make fuzz         run each fuzzer longer (FUZZ_SECONDS, default 300)
#   make bench        the benchmarks under bench/ (needs the S3 server)
#   make install PREFIX=/usr/local
#   make format       clang-format the C sources
#   make clean

PREFIX ?= /usr/local
BUILD ?= build
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 300

.PHONY: all build deps demo test fuzz bench install format clean

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

deps:
	scripts/deps

demo: deps build
	scripts/demo

test: deps
	scripts/test-all

fuzz: deps
	cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug \
	    -DCMAKE_C_COMPILER=clang -DTFS_FUZZ=ON \
	    -DTFS_SANITIZE=address,undefined \
	    -DTFS_FUZZ_SECONDS=$(FUZZ_SECONDS) >/dev/null
	cmake --build build-fuzz -j $(JOBS)
	ctest --test-dir build-fuzz --output-on-failure -L fuzz

bench: deps build
	scripts/deps --bench
	bench/run-all

install: build
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)
	cmake --install $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build build-asan build-fuzz
