// SPDX-License-Identifier: Apache-2.0

// Command csicall makes the CSI calls a container orchestrator makes for
// one volume, one per run, against a driver's socket, so a VM test can
// play the external-attacher and the kubelet moving a pod between nodes:
//
//	csicall -endpoint unix:///run/csi/csi.sock create    -volume db -node a -param K=V ... [-bytes N]
//	csicall -endpoint ... publish   -volume db -node b [-timeout 5m]
//	csicall -endpoint ... unpublish -volume db -node a
//	csicall -endpoint ... stage     -volume db -staging DIR
//	csicall -endpoint ... unstage   -volume db -staging DIR
//	csicall -endpoint ... mount     -volume db -staging DIR -target FILE
//	csicall -endpoint ... umount    -volume db -target FILE
//
// create is the external-provisioner's call for a claim scheduled on
// -node (its topology, preferred and requisite), with the StorageClass's
// parameters; it prints the volume's ID, size and topology. It calls again
// on ResourceExhausted, Unavailable or Aborted, as the provisioner
// retries a claim, until -timeout (-once: a single call).
//
// Volumes are raw block, single-node writer: the target is a file the
// device is bind-mounted on. publish calls again after DeadlineExceeded,
// Unavailable (etcd without a leader while a member's node is down) or
// Aborted, as the external-attacher requeues a failed attach, until
// -timeout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	tccsi "github.com/tidecache/tidecache/pkg/csi"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///run/csi/csi.sock", "the driver's socket")
	volume := flag.String("volume", "", "volume ID")
	node := flag.String("node", "", "node ID (publish, unpublish)")
	staging := flag.String("staging", "", "staging path (stage, unstage, mount)")
	target := flag.String("target", "", "target path (mount, umount)")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long publish keeps calling")
	size := flag.Int64("bytes", 0, "the claim's size (create; 0: none asked)")
	once := flag.Bool("once", false, "create: call once, not again while the cluster has no room")
	params := map[string]string{}
	flag.Func("param", "a StorageClass parameter, KEY=VALUE (create; repeat for each)", func(kv string) error {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("want KEY=VALUE, not %q", kv)
		}
		params[k] = v
		return nil
	})
	flag.Parse()
	if flag.NArg() != 1 || *volume == "" {
		fmt.Fprintln(os.Stderr, "usage: csicall [flags] create|publish|unpublish|stage|unstage|mount|umount -volume ID")
		os.Exit(2)
	}
	conn, err := grpc.NewClient(*endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	ctl, nd := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	block := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	switch flag.Arg(0) {
	case "create":
		// Called again while the cluster has no room yet (a node's
		// inventory not published), as the external-provisioner
		// retries a claim, until -timeout.
		top := []*csi.Topology{{Segments: map[string]string{tccsi.TopologyKey: *node}}}
		var resp *csi.CreateVolumeResponse
		for {
			resp, err = ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: *volume, Parameters: params,
				VolumeCapabilities: []*csi.VolumeCapability{block}, CapacityRange: &csi.CapacityRange{RequiredBytes: *size},
				AccessibilityRequirements: &csi.TopologyRequirement{Preferred: top, Requisite: top}})
			code := status.Code(err)
			if *once || code != codes.ResourceExhausted && code != codes.Unavailable && code != codes.Aborted || ctx.Err() != nil {
				break
			}
			fmt.Fprintf(os.Stderr, "create: %v; calling again\n", err)
			time.Sleep(2 * time.Second)
		}
		if err == nil {
			v := resp.GetVolume()
			var nodes []string
			for _, t := range v.GetAccessibleTopology() {
				nodes = append(nodes, t.GetSegments()[tccsi.TopologyKey])
			}
			fmt.Printf("volume %s: %d bytes, on nodes %s\n", v.GetVolumeId(), v.GetCapacityBytes(), strings.Join(nodes, ","))
		}
	case "publish":
		// One call at a time with the attacher's own deadline, again
		// while the driver says the volume is still on its way.
		for {
			cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
			_, err = ctl.ControllerPublishVolume(cctx, &csi.ControllerPublishVolumeRequest{VolumeId: *volume, NodeId: *node, VolumeCapability: block})
			ccancel()
			code := status.Code(err)
			if code != codes.DeadlineExceeded && code != codes.Unavailable && code != codes.Aborted || ctx.Err() != nil {
				break
			}
			fmt.Fprintf(os.Stderr, "publish: %v; calling again\n", err)
			if code != codes.DeadlineExceeded {
				time.Sleep(2 * time.Second) // the attacher's backoff
			}
		}
	case "unpublish":
		_, err = ctl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: *volume, NodeId: *node})
	case "stage":
		_, err = nd.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: *volume, StagingTargetPath: *staging, VolumeCapability: block})
	case "unstage":
		_, err = nd.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: *volume, StagingTargetPath: *staging})
	case "mount":
		_, err = nd.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: *volume, StagingTargetPath: *staging, TargetPath: *target, VolumeCapability: block})
	case "umount":
		_, err = nd.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: *volume, TargetPath: *target})
	default:
		fmt.Fprintf(os.Stderr, "csicall: unknown call %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s %s: ok in %.1f s\n", flag.Arg(0), *volume, time.Since(start).Seconds())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "csicall:", err)
	os.Exit(1)
}
