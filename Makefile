# rnic-emu: the two commands of README.md. Each does all set-up it needs on a fresh machine
# (host packages through apt-get, the cached guest image through images/build.sh, crates
# through cargo).
#
#   make demo   boot the default topology (embedded single-switch) and show what the guest sees
#   make test   unit, host-level (vfio-user client) and guest-level (QEMU) tests
CARGO ?= cargo

.PHONY: demo test image
image:
	bash images/build.sh

demo: image
	$(CARGO) run --release -q -p rnic-emu -- run --no-build -- rnic-status

test: image
	$(CARGO) test --workspace
