/*
 * A C imitation of an rmca plugin descriptor, compiled by framework/tests/plugins.rs once per
 * refusal case with -D overrides. The structs mirror framework/src/plugin.rs (#[repr(C)]:
 * PluginDescriptor = u32 then six pointers; PluginVTable = two function pointers).
 *
 * Defaults are the host's own values (passed in by the test), so each case changes one field.
 */
#include <stddef.h>
#include <stdint.h>

struct rmca_plugin_vtable {
    const void *(*component)(void);
    void (*set_tracing_dispatch)(const void *dispatch);
};

struct rmca_plugin_descriptor {
    uint32_t abi_version;
    const char *rustc_version;
    const char *framework_api_version;
    const char *framework;
    const char *name;
    const char *component_version;
    const struct rmca_plugin_vtable *vtable;
};

/* A C plugin cannot produce a Rust ComponentRef: the component entry returns NULL, which the
 * loader must refuse as corrupt (the "nullcomp" case). Every other case is refused before the
 * vtable is touched. */
static const void *no_component(void) { return NULL; }
static void ignore_dispatch(const void *dispatch) { (void)dispatch; }
static const struct rmca_plugin_vtable VTABLE_OK = { no_component, ignore_dispatch };

#ifndef ABI_VERSION
#error "the test passes ABI_VERSION"
#endif
#ifndef RUSTC_VERSION
#error "the test passes RUSTC_VERSION"
#endif
#ifndef FRAMEWORK_API_VERSION
#error "the test passes FRAMEWORK_API_VERSION"
#endif
#ifndef FRAMEWORK
#define FRAMEWORK "btl"
#endif
#ifndef NAME
#error "the test passes NAME"
#endif
#ifndef VTABLE
#define VTABLE (&VTABLE_OK)
#endif

static const struct rmca_plugin_descriptor DESCRIPTOR = {
    ABI_VERSION, RUSTC_VERSION, FRAMEWORK_API_VERSION, FRAMEWORK, NAME, "0.0.0-fixture", VTABLE,
};

const struct rmca_plugin_descriptor *rmca_plugin_descriptor(void) { return &DESCRIPTOR; }
