// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"context"
	"errors"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/tidecache/tidecache/pkg/store"
	"github.com/tidecache/tidecache/pkg/volmove"
)

// A tidecache volume runs on one node at a time. ControllerPublishVolume
// is how Kubernetes asks for it on the node a pod was scheduled to (the
// external-attacher turns a VolumeAttachment into the call, before the
// kubelet stages the volume there):
//
//   - on the volume's own node there is nothing to do;
//   - a volume on a shared origin (spec.sharedOrigin) moves to the node in
//     a planned move (package volmove, then the owner's daemon), its write
//     cache warm: a pod rescheduled to another node finds its volume
//     there with every acknowledged write and its cache. The call returns
//     once the volume runs on the node, or with the context's deadline,
//     and the attacher calls again (the request is idempotent);
//   - any other volume lives on its node's own HDDs, which no other node
//     sees (FailedPrecondition). The provisioner's topology keeps pods of
//     such volumes on their node, so this is not asked in practice.
//
// ControllerUnpublishVolume has nothing to undo: the kubelet unstaged the
// volume on the node it leaves, and the volume keeps running there until
// a publish elsewhere moves it.

// publishPoll is how often ControllerPublishVolume looks at a move.
const publishPoll = 250 * time.Millisecond

func (c *controller) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	switch {
	case id == "":
		return nil, errorf(errInvalid, "volume ID missing")
	case node == "":
		return nil, errorf(errInvalid, "node ID missing")
	case req.GetVolumeCapability() == nil:
		return nil, errorf(errInvalid, "volume %s: volume capability missing", id)
	}
	if err := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); err != nil {
		return nil, err
	}
	spec, _, err := c.st.GetVolumeSpec(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errorf(errNotFound, "volume %q: no such volume", id)
	}
	if err != nil {
		return nil, err
	}
	if spec.Node == node && spec.MoveTo == "" {
		// Nothing to do here, even while the node is down (it lost
		// its power as it took a moved volume over, say): its daemon
		// starts the volume when it is back, and NodeStageVolume
		// waits for the device. Refusing would fail an attach that
		// only has to wait.
		return &csi.ControllerPublishVolumeResponse{}, nil
	}
	if _, _, err := c.st.GetNode(ctx, node); errors.Is(err, store.ErrNotFound) {
		return nil, errorf(errNotFound, "node %q is not a live tidecache node", node)
	} else if err != nil {
		return nil, err
	}
	switch {
	case spec.SharedOrigin == nil:
		return nil, errorf(errPrecondition, "volume %s caches the HDDs of node %s, which node %s does not see: it is used on node %s only", id, spec.Node, node, spec.Node)
	}
	var r volmove.Request
	for try := 0; ; try++ {
		r, err = volmove.Ask(ctx, c.st, id, node)
		if !errors.Is(err, store.ErrConflict) || try == conflictRetries {
			break
		}
	}
	switch {
	case errors.Is(err, volmove.ErrNodeNotLive):
		return nil, errorf(errNotFound, "%v", err)
	case errors.Is(err, volmove.ErrNodeUnfit), errors.Is(err, volmove.ErrMoving):
		return nil, errorf(errPrecondition, "%v", err)
	case err != nil:
		return nil, err
	}
	if r.Written {
		c.d.log.Info("moving the volume to the node it is published on, its cache warm", "volume", id, "from", r.Spec.Node, "to", node, "revision", r.Revision)
	}
	if err := c.waitMoved(ctx, id, node); err != nil {
		return nil, err
	}
	c.d.log.Info("volume published on the node it moved to", "volume", id, "node", node)
	return &csi.ControllerPublishVolumeResponse{}, nil
}

// waitMoved waits until volume id runs on node, or the move was called
// off (FailedPrecondition, with what the status says).
func (c *controller) waitMoved(ctx context.Context, id, node string) error {
	for {
		spec, _, err := c.st.GetVolumeSpec(ctx, id)
		if err != nil {
			return err
		}
		st, _, err := c.st.GetVolumeStatus(ctx, id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		switch {
		case volmove.Arrived(spec, st, node):
			return nil
		case volmove.CalledOff(spec, node):
			return errorf(errPrecondition, "volume %s stays on node %s: its move to node %s was called off: %s", id, spec.Node, node, volmove.WhyCalledOff(spec, st, node))
		}
		select {
		case <-ctx.Done():
			return errorf(ctx.Err(), "volume %s on its way to node %s (now %s on node %s: %s): %v", id, node, st.State, st.Node, st.Error, ctx.Err())
		case <-time.After(publishPoll):
		}
	}
}

func (c *controller) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, errorf(errInvalid, "volume ID missing")
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}
