package vm

import "github.com/airlock-sandbox/airlock/internal/boundary/privdir"

// privatePrefix begins the name of a VM's private directory (its
// sockets, its ramdisk, QEMU's empty root), in the system's temporary
// directory, followed by the sandbox's id.
const privatePrefix = "airlock-vm-"

// Sweep removes the private directories of VMs whose supervisor died
// (by SIGKILL, say) and returns their sandboxes' ids. QEMU itself died
// with its supervisor; nothing else of a VM is on the host.
func Sweep() []string { return privdir.Sweep(privatePrefix) }

// Reclaim removes the private directories of sandbox id's VMs, whose
// supervisor is known to be gone.
func Reclaim(id string) error { return privdir.Reclaim(privatePrefix, id) }
