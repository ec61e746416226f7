"""The Kubernetes Pod Security Standards' "restricted" level (which includes "baseline"), as published in
kubernetes.io/docs/concepts/security/pod-security-standards for Kubernetes 1.33, applied to a pod spec the way the
Pod Security admission controller applies it: each rule, its fields, the values it allows. No library on PyPI
implements them, hence these checks; each returns one line per violation naming the field."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
        "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)  # fmt: skip
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            yield f"{field}[{c.get('name', '?')}]", c


def baseline(spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None) -> list[str]:
    """Violations of the baseline level."""
    out: list[str] = []
    pod = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"Host Namespaces: spec.{field} must be unset or false")
    contexts = [("spec.securityContext", pod)] + [
        (f"{where}.securityContext", c.get("securityContext") or {}) for where, c in _containers(spec)
    ]
    for where, ctx in contexts:
        if (ctx.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"HostProcess: {where}.windowsOptions.hostProcess must be unset or false")
        selinux = ctx.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES:
            out.append(f"SELinux: {where}.seLinuxOptions.type {selinux['type']!r} is not allowed")
        for part in ("user", "role"):
            if selinux.get(part):
                out.append(f"SELinux: {where}.seLinuxOptions.{part} must be unset")
        if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"Seccomp: {where}.seccompProfile.type must not be Unconfined")
        if (ctx.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            out.append(f"AppArmor: {where}.appArmorProfile.type must be RuntimeDefault or Localhost")
    for where, c in _containers(spec):
        ctx = c.get("securityContext") or {}
        if ctx.get("privileged"):
            out.append(f"Privileged Containers: {where}.securityContext.privileged must be unset or false")
        added = set((ctx.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            out.append(f"Capabilities: {where} adds {sorted(added - BASELINE_CAPABILITIES)}")
        if ctx.get("procMount", "Default") != "Default":
            out.append(f"/proc Mount Type: {where}.securityContext.procMount must be Default")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"Host Ports: {where}.ports hostPort must be unset or 0")
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            out.append(f"HostPath Volumes: volume {v.get('name')} is a hostPath")
    for s in pod.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(f"Sysctls: {s.get('name')} is not a safe sysctl")
    for key, value in (annotations or {}).items():
        if key.startswith(APPARMOR_ANNOTATION) and not (value == "runtime/default" or value.startswith("localhost/")):
            out.append(f"AppArmor: annotation {key}={value} is not allowed")
    return out


def restricted(spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None) -> list[str]:
    """Violations of the restricted level: baseline's, then restricted's own."""
    out = baseline(spec, annotations)
    pod = spec.get("securityContext") or {}
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"Volume Types: volume {v.get('name')} is {sorted(kinds - RESTRICTED_VOLUMES)}")
    if pod.get("runAsNonRoot") is False:
        out.append("Running as Non-root: spec.securityContext.runAsNonRoot must not be false")
    if pod.get("runAsUser") == 0:
        out.append("Running as Non-root user: spec.securityContext.runAsUser must not be 0")
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    for where, c in _containers(spec):
        ctx = c.get("securityContext") or {}
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append(f"Privilege Escalation: {where}.securityContext.allowPrivilegeEscalation must be false")
        non_root = ctx.get("runAsNonRoot", pod.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"Running as Non-root: {where} must have runAsNonRoot true (its own or the pod's)")
        if ctx.get("runAsUser") == 0:
            out.append(f"Running as Non-root user: {where}.securityContext.runAsUser must not be 0")
        seccomp = (ctx.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"Seccomp: {where} needs seccompProfile.type RuntimeDefault or Localhost (its own or the pod's)")
        caps = ctx.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"Capabilities: {where}.securityContext.capabilities.drop must include ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"Capabilities: {where} may add only NET_BIND_SERVICE")
    return out
