// Command fakegpu is a kubelet device plugin for the testbed's real node. It advertises
// simulated GPUs under an extended resource name and gives a container that is allocated
// some what a GPU container gets on a real node: the visible-devices variable, a device
// node per GPU (the machine's /dev/null in its place), and a simulated nvidia-smi that
// reports the utilization written to each device's directory on the machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	share   string
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, request *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for _, wanted := range request.ContainerRequests {
		answer := &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{
				"NVIDIA_VISIBLE_DEVICES":     strings.Join(wanted.DevicesIds, ","),
				"NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
			},
			Mounts: []*pluginapi.Mount{{
				ContainerPath: "/usr/local/bin/nvidia-smi",
				HostPath:      filepath.Join(p.share, "nvidia-smi"),
				ReadOnly:      true,
			}},
		}
		for _, id := range wanted.DevicesIds {
			index := indexOf(p.devices, id)
			if index < 0 {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			answer.Mounts = append(answer.Mounts, &pluginapi.Mount{
				ContainerPath: "/run/devboxes-fake-gpu/" + id,
				HostPath:      filepath.Join(p.share, "devices", id),
				ReadOnly:      true,
			})
			answer.Devices = append(answer.Devices, &pluginapi.DeviceSpec{
				ContainerPath: fmt.Sprintf("/dev/nvidia%d", index),
				HostPath:      "/dev/null",
				Permissions:   "rw",
			})
		}
		response.ContainerResponses = append(response.ContainerResponses, answer)
	}
	return response, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func indexOf(devices []*pluginapi.Device, id string) int {
	for i, device := range devices {
		if device.ID == id {
			return i
		}
	}
	return -1
}

// serve listens on the plugin's socket and registers it with the kubelet; it returns when
// the socket is removed, which the kubelet does when it restarts.
func serve(ctx context.Context, p *plugin, socket, resource string, registered *atomic.Bool) error {
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(listener) }()
	defer server.Stop()

	connection, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer connection.Close()
	call, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(connection).Register(call, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(socket),
		ResourceName: resource,
	})
	if err != nil {
		return fmt.Errorf("registering with the kubelet: %w", err)
	}
	registered.Store(true)
	defer registered.Store(false)
	log.Printf("registered %d devices of %s", len(p.devices), resource)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		if _, err := os.Stat(socket); errors.Is(err, os.ErrNotExist) {
			return errors.New("the kubelet removed the plugin socket")
		}
	}
}

func main() {
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource to advertise")
	count := flag.Int("count", 1, "how many devices")
	prefix := flag.String("id-prefix", "GPU-fake", "device ids are <prefix>-<index>")
	share := flag.String("share", "", "directory with nvidia-smi and devices/<id>/")
	health := flag.String("health", "", "address of /healthz, which answers 200 while registered")
	flag.Parse()
	if *share == "" || *health == "" || *count < 1 {
		log.Fatal("--share, --health and a --count of at least 1 are required")
	}
	p := &plugin{share: *share}
	for i := 0; i < *count; i++ {
		id := fmt.Sprintf("%s-%d", *prefix, i)
		p.devices = append(p.devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
		if err := os.MkdirAll(filepath.Join(*share, "devices", id), 0o755); err != nil {
			log.Fatal(err)
		}
	}
	var registered atomic.Bool
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !registered.Load() {
			http.Error(w, "not registered", http.StatusServiceUnavailable)
		}
	})
	go func() { log.Fatal(http.ListenAndServe(*health, nil)) }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	socket := filepath.Join(pluginapi.DevicePluginPath, "devboxes-fakegpu.sock")
	for ctx.Err() == nil {
		if err := serve(ctx, p, socket, *resource, &registered); err != nil {
			log.Printf("%v; registering again", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}
