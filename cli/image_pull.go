package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/image/oci"
)

func (a *app) newImagePullCmd(cacheDir *string) *cobra.Command {
	var (
		opts   oci.Options
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an OCI or docker image into the image cache",
		Long: `Pull an image into the image cache, where sandboxes use it as their root.

REF is a registry reference, completed as docker completes it
(python:3.12-slim is docker.io/library/python:3.12-slim; no tag is :latest;
NAME@sha256:... pins a manifest), a local OCI image layout folder
(oci:DIR[:TAG|@DIGEST], or DIR itself when it holds an oci-layout file), or
a docker save tarball (docker-archive:FILE[:NAME:TAG], or FILE.tar).

Credentials come from docker's ~/.docker/config.json ($DOCKER_CONFIG), as
docker login leaves them. A registry on loopback may answer over plain
HTTP; any other needs --insecure for that. Layers are kept by digest in the
cache and shared between images: a layer already there is not downloaded
again. Each layer is unpacked as an untrusted tar: nothing in it may reach
outside the image's root, device nodes are left out, and the whole is
bounded in size and entries.`,
		Example: `  airlock image pull python:3.12-slim
  airlock image pull --platform linux/arm64 ghcr.io/org/tool@sha256:...
  airlock image pull --insecure registry.lan:5000/team/app:1
  airlock image pull ./app.tar
  airlock image pull oci:./layout:v1 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cache, err := openImageCache(*cacheDir)
			if err != nil {
				return err
			}
			noteOwners()
			view := newProgressView(os.Stderr, asJSON)
			img, err := oci.Pull(cmd.Context(), cache, args[0], opts, view.Report)
			view.Close()
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(img)
			}
			fmt.Printf("%s\t%s\t%s\n", termText(strings.Join(img.Names, ", ")), img.Key, humanBytes(img.Size))
			return nil
		},
	}
	cmd.Flags().BoolVar(&opts.Insecure, "insecure", false, "allow plain HTTP, and TLS without a verified certificate, to the registry")
	cmd.Flags().StringVar(&opts.Platform, "platform", "", "the platform to pull from a multi-platform image, OS/ARCH[/VARIANT] (default linux on this machine's architecture)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the image as JSON (progress goes to stderr as plain lines)")
	return cmd
}
