// Command fakedra is a DRA kubelet plugin for the testbed's real node. It publishes the
// node's simulated GPUs in a ResourceSlice with the attributes it is given, and prepares
// an allocated claim by writing a CDI spec that gives the container what a GPU container
// gets on a real node: the visible-devices variable, a device node per GPU (the machine's
// /dev/null in its place), and the simulated nvidia-smi with each device's directory.
// Unpreparing a claim removes its spec.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// cdiKind is the vendor and class of the CDI devices this plugin writes; each claim's
// devices are named after the claim's UID, so a runtime's cached spec never matches a
// later claim.
const cdiKind = "k8s.gpu.nvidia.com/claim"

type cdiDeviceNode struct {
	Path        string `json:"path"`
	HostPath    string `json:"hostPath"`
	Type        string `json:"type"`
	Permissions string `json:"permissions"`
}

type cdiMount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Type          string   `json:"type"`
	Options       []string `json:"options"`
}

type cdiEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
	Mounts      []cdiMount      `json:"mounts,omitempty"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiSpec struct {
	Version        string      `json:"cdiVersion"`
	Kind           string      `json:"kind"`
	Devices        []cdiDevice `json:"devices"`
	ContainerEdits cdiEdits    `json:"containerEdits"`
}

type driver struct {
	name    string
	devices map[string]resourceapi.Device
	share   string
	cdiDir  string
	stop    context.CancelFunc
}

func (d *driver) specPath(claim types.UID) string {
	return filepath.Join(d.cdiDir, fmt.Sprintf("%s-%s.json", d.name, claim))
}

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := d.prepare(claim)
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return results, nil
}

func (d *driver) prepare(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	spec := cdiSpec{Version: "0.6.0", Kind: cdiKind}
	var uuids []string
	var prepared []kubeletplugin.Device
	for _, result := range claim.Status.Allocation.Devices.Results {
		if result.Driver != d.name {
			continue
		}
		device, ok := d.devices[result.Device]
		if !ok {
			return nil, fmt.Errorf("claim %s/%s: this node has no device %q", claim.Namespace, claim.Name, result.Device)
		}
		holder, err := d.holder(result.Device, claim.UID)
		if err != nil {
			return nil, err
		}
		if holder != "" {
			return nil, fmt.Errorf("claim %s/%s: device %s is prepared for claim %s", claim.Namespace, claim.Name, result.Device, holder)
		}
		uuid := *device.Attributes["uuid"].StringValue
		index := *device.Attributes["index"].IntValue
		uuids = append(uuids, uuid)
		name := fmt.Sprintf("%s-%s", claim.UID, result.Device)
		spec.Devices = append(spec.Devices, cdiDevice{
			Name: name,
			ContainerEdits: cdiEdits{
				DeviceNodes: []cdiDeviceNode{{
					Path:        fmt.Sprintf("/dev/nvidia%d", index),
					HostPath:    "/dev/null",
					Type:        "c",
					Permissions: "rw",
				}},
				Mounts: []cdiMount{readOnly(filepath.Join(d.share, "devices", uuid), "/run/devboxes-fake-gpu/"+uuid)},
			},
		})
		prepared = append(prepared, kubeletplugin.Device{
			Requests:     []string{result.Request},
			PoolName:     result.Pool,
			DeviceName:   result.Device,
			CDIDeviceIDs: []string{cdiKind + "=" + name},
		})
	}
	// What every container of the claim gets once, whichever of its devices it has.
	spec.ContainerEdits = cdiEdits{
		Env: []string{
			"NVIDIA_VISIBLE_DEVICES=" + strings.Join(uuids, ","),
			"NVIDIA_DRIVER_CAPABILITIES=compute,utility",
		},
		Mounts: []cdiMount{readOnly(filepath.Join(d.share, "nvidia-smi"), "/usr/local/bin/nvidia-smi")},
	}
	if err := writeFile(d.specPath(claim.UID), spec); err != nil {
		return nil, err
	}
	log.Printf("prepared claim %s/%s: %s", claim.Namespace, claim.Name, strings.Join(uuids, ","))
	return prepared, nil
}

// holder is the UID of another claim whose spec gives it device, or "" when none does: the
// scheduler never allocates a device twice, and this refuses a claim that says otherwise.
func (d *driver) holder(device string, claim types.UID) (types.UID, error) {
	specs, err := filepath.Glob(filepath.Join(d.cdiDir, d.name+"-*.json"))
	if err != nil {
		return "", err
	}
	for _, path := range specs {
		if path == d.specPath(claim) {
			continue
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		var spec cdiSpec
		if err := json.Unmarshal(data, &spec); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		owner := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), d.name+"-"), ".json")
		for _, given := range spec.Devices {
			if given.Name == owner+"-"+device {
				return types.UID(owner), nil
			}
		}
	}
	return "", nil
}

func readOnly(host, container string) cdiMount {
	return cdiMount{HostPath: host, ContainerPath: container, Type: "bind", Options: []string{"ro", "bind", "nosuid", "nodev"}}
}

// writeFile replaces path at once: a runtime watching the directory never reads half a spec.
func writeFile(path string, spec cdiSpec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	partial := filepath.Join(filepath.Dir(path), "."+filepath.Base(path))
	if err := os.WriteFile(partial, data, 0o644); err != nil {
		return err
	}
	return os.Rename(partial, path)
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	results := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		err := os.Remove(d.specPath(claim.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		if err == nil {
			log.Printf("unprepared claim %s", claim.String())
		}
		results[claim.UID] = err
	}
	return results, nil
}

func (d *driver) HandleError(_ context.Context, err error, msg string) {
	log.Printf("%s: %v", msg, err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.stop()
	}
}

// loadDevices reads the devices to publish, as resource.k8s.io/v1 writes them; each needs
// the uuid and index attributes that preparing a claim hands to the container.
func loadDevices(path string) ([]resourceapi.Device, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var devices []resourceapi.Device
	if err := json.Unmarshal(data, &devices); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, device := range devices {
		if device.Attributes["uuid"].StringValue == nil || device.Attributes["index"].IntValue == nil {
			return nil, fmt.Errorf("%s: device %q needs a string uuid and an int index attribute", path, device.Name)
		}
	}
	return devices, nil
}

func main() {
	name := flag.String("driver", "gpu.nvidia.com", "the DRA driver name")
	node := flag.String("node", "", "the node's name")
	kubeconfig := flag.String("kubeconfig", "", "credentials that may write ResourceSlices")
	kubeletRoot := flag.String("kubelet-root", "", "the kubelet's --root-dir")
	devicesFile := flag.String("devices", "", "JSON list of the devices to publish")
	share := flag.String("share", "", "directory with nvidia-smi and devices/<uuid>/")
	cdiDir := flag.String("cdi-dir", "", "directory the container runtime reads CDI specs from")
	health := flag.String("health", "", "address of /healthz, which answers 200 while registered")
	flag.Parse()
	for flagName, value := range map[string]string{"node": *node, "kubeconfig": *kubeconfig, "kubelet-root": *kubeletRoot, "devices": *devicesFile, "share": *share, "cdi-dir": *cdiDir, "health": *health} {
		if value == "" {
			log.Fatalf("--%s is required", flagName)
		}
	}
	devices, err := loadDevices(*devicesFile)
	if err != nil {
		log.Fatal(err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		log.Fatal(err)
	}
	registry := filepath.Join(*kubeletRoot, "plugins_registry")
	data := filepath.Join(*kubeletRoot, "plugins", *name)
	for _, directory := range []string{registry, data, *cdiDir} {
		if err := os.MkdirAll(directory, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	d := &driver{name: *name, devices: map[string]resourceapi.Device{}, share: *share, cdiDir: *cdiDir, stop: stop}
	for _, device := range devices {
		d.devices[device.Name] = device
		uuid := *device.Attributes["uuid"].StringValue
		if err := os.MkdirAll(filepath.Join(*share, "devices", uuid), 0o755); err != nil {
			log.Fatal(err)
		}
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(*name),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*node),
		kubeletplugin.RegistrarDirectoryPath(registry),
		kubeletplugin.PluginDataDirectoryPath(data),
	)
	if err != nil {
		log.Fatalf("starting the kubelet plugin: %v", err)
	}
	defer helper.Stop()
	pools := map[string]resourceslice.Pool{*node: {Slices: []resourceslice.Slice{{Devices: devices}}}}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: pools}); err != nil {
		log.Fatalf("publishing devices: %v", err)
	}
	log.Printf("publishing %d devices of %s on %s", len(devices), *name, *node)

	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if status := helper.RegistrationStatus(); status == nil || !status.PluginRegistered {
			http.Error(w, "not registered with the kubelet", http.StatusServiceUnavailable)
		}
	})
	server := &http.Server{Addr: *health}
	go func() {
		if err := server.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			log.Print(err)
			stop()
		}
	}()
	<-ctx.Done()
	_ = server.Close()
}
