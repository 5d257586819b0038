# rnic-emu: the two commands of README.md. Each does all set-up it needs on a fresh machine
# (host packages through apt-get, the cached guest image through images/build.sh, crates
# through cargo).
#
#   make demo   boot the default topology (embedded single-switch), show what the guest sees,
#               and run a GPUDirect RDMA WRITE into GPU memory with the path it took; then
#               boot two guests and RDMA WRITE GPU to GPU between them over the RoCEv2 fabric;
#               last, four guests run a ring all_reduce GPU to GPU (rnic-coll, nccl-tests table)
#   make test   unit, host-level (vfio-user client) and guest-level (QEMU) tests
#   make fuzz   every fuzz target for FUZZ_SECONDS (default 120) each from the kept corpus
#               (device/fuzz/README.md); make fuzz-seed rewrites the corpus's seed inputs;
#               make fuzz-coverage prints the corpus's line coverage per module
CARGO ?= cargo

.PHONY: demo test image fuzz fuzz-seed fuzz-coverage
image:
	bash images/build.sh

demo: image
	$(CARGO) run --release -q -p rnic-emu -- run --no-build -- \
		'rnic-status && echo "== GPUDirect RDMA WRITE, host memory -> GPU memory, then GPU -> GPU" && \
		 rnic-perf write -s 4M -n 16 --src host --dst gpu --verify && \
		 rnic-perf write -s 4M -n 16 --src gpu --dst gpu --verify'
	$(CARGO) run --release -q -p rnic-emu -- run --no-build --topology qemu-configs/two-node.toml \
		--on 0 'rnic-perf write --server -s 4M -n 16 --src gpu --dst gpu --verify && \
		        rnic-perf write-lat --server --id lat -s 64 -n 500' \
		--on 1 'rnic-perf write -s 4M -n 16 --src gpu --dst gpu --verify 0 && \
		        rnic-perf write-lat --id lat -s 64 -n 500 0' 
	$(CARGO) run --release -q -p rnic-emu -- run --no-build --topology qemu-configs/four-node.toml \
		--on 0 'rnic-coll all_reduce -b 1M -e 16M -f 2 -n 5' --on 1 'rnic-coll all_reduce -b 1M -e 16M -f 2 -n 5' \
		--on 2 'rnic-coll all_reduce -b 1M -e 16M -f 2 -n 5' --on 3 'rnic-coll all_reduce -b 1M -e 16M -f 2 -n 5'

test: image
	$(CARGO) test --workspace

fuzz:
	bash device/fuzz/run-all.sh

fuzz-coverage:
	bash device/fuzz/coverage.sh

fuzz-seed:
	$(CARGO) test -q -p rnic-emu-testkit --lib fuzzing::corpus_tests::write_seed_corpus -- --ignored
